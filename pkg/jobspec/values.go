package jobspec

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Helpers for the values of a tree (see tree.go).

// describe names a tree value's JSON type, with the value for scalars:
// `string "abc"`, `number 5`, `boolean true`, `null`, `object`, `array`.
func describe(v any) string {
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

// asInt converts a tree number to an int64; integral numbers written as
// floats ("2.0", "1e3") are accepted.
func asInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("expected an integer, got %s", describe(v))
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := asFloat(n)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("expected an integer, got %s", describe(v))
	}
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("number %s is out of range", n)
	}
	return int64(f), nil
}

// asFloat converts a tree number to a finite float64.
func asFloat(n json.Number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0, fmt.Errorf("number %s is out of range", n)
	}
	return f, nil
}

// firstInvalid returns the first invalidValue in v, walking objects in key
// order, and its path under path.
func firstInvalid(path string, v any) (string, invalidValue, bool) {
	switch x := v.(type) {
	case invalidValue:
		return path, x, true
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if p, iv, ok := firstInvalid(messages.JoinPath(path, k), x[k]); ok {
				return p, iv, true
			}
		}
	case []any:
		for i, e := range x {
			if p, iv, ok := firstInvalid(messages.IndexPath(path, i), e); ok {
				return p, iv, true
			}
		}
	}
	return "", invalidValue{}, false
}
