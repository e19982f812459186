package jsonnode

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// The values of a document tree, as pkg/jobspec's converter makes them from
// a yaml.Node: nil, bool, string, json.Number, map[string]any and []any.

// Describe names a tree value's JSON type, with the value for scalars:
// `string "abc"`, `number 5`, `boolean true`, `null`, `object`, `array`.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case string:
		if len(x) > 40 {
			x = x[:37] + "..."
		}
		return "string " + strconv.Quote(x)
	case json.Number:
		return "number " + string(x)
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("unsupported value of type %T", v)
}

// AsInt converts a tree number to an int64; integral numbers written as
// floats ("2.0", "1e3") are accepted.
func AsInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("expected an integer, got %s", Describe(v))
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := AsFloat(n)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("expected an integer, got %s", Describe(v))
	}
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("number %s is out of range", n)
	}
	return int64(f), nil
}

// AsFloat converts a tree number to a finite float64.
func AsFloat(n json.Number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0, fmt.Errorf("number %s is out of range", n)
	}
	return f, nil
}
