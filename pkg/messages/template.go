package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Template is a parsed string with ${...} references, as used in shell
// steps and group_by. Grammar:
//
//	${item}            the whole item (JSON text, or the scalar itself)
//	${item.a.b}        field b of field a; a numeric segment indexes an array
//	${item_id} ${job_id} ${attempt}
//	${map.results} ${map.successful} ${map.failed} ${map.total}   (reduce steps)
//	${env.NAME}        an environment variable of the agent
//	$${                a literal "${"
type Template struct {
	Raw   string
	Parts []TemplatePart
}

// TemplatePart is a literal (Ref == nil) or a reference.
type TemplatePart struct {
	Literal string
	Ref     []string // e.g. ["item", "a", "b"]
}

// Template namespaces.
const (
	RefItem    = "item"
	RefItemID  = "item_id"
	RefJobID   = "job_id"
	RefAttempt = "attempt"
	RefMap     = "map"
	RefEnv     = "env"
)

var mapRefs = map[string]bool{"results": true, "successful": true, "failed": true, "total": true}

// ParseTemplate parses s. Unknown namespaces and malformed references are
// errors; whether ${map.*} is allowed is checked by the caller (reduce only).
func ParseTemplate(s string) (Template, error) {
	t := Template{Raw: s}
	var lit strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			lit.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			lit.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("unterminated ${ at offset %d", i)
		}
		expr := strings.TrimSpace(s[i+2 : i+2+end])
		ref, err := parseRef(expr)
		if err != nil {
			return Template{}, fmt.Errorf("${%s} at offset %d: %w", expr, i, err)
		}
		if lit.Len() > 0 {
			t.Parts = append(t.Parts, TemplatePart{Literal: lit.String()})
			lit.Reset()
		}
		t.Parts = append(t.Parts, TemplatePart{Ref: ref})
		i += 2 + end + 1
	}
	if lit.Len() > 0 {
		t.Parts = append(t.Parts, TemplatePart{Literal: lit.String()})
	}
	return t, nil
}

func parseRef(expr string) ([]string, error) {
	if expr == "" {
		return nil, fmt.Errorf("empty reference")
	}
	segs := strings.Split(expr, ".")
	for _, sg := range segs {
		if sg == "" {
			return nil, fmt.Errorf("empty path segment")
		}
	}
	switch segs[0] {
	case RefItem:
		return segs, nil
	case RefItemID, RefJobID, RefAttempt:
		if len(segs) != 1 {
			return nil, fmt.Errorf("%s takes no field", segs[0])
		}
		return segs, nil
	case RefMap:
		if len(segs) != 2 || !mapRefs[segs[1]] {
			return nil, fmt.Errorf("map references are map.results, map.successful, map.failed and map.total")
		}
		return segs, nil
	case RefEnv:
		if len(segs) != 2 {
			return nil, fmt.Errorf("env takes one variable name: ${env.NAME}")
		}
		return segs, nil
	}
	return nil, fmt.Errorf("unknown reference %q (use item, item.<field>, item_id, job_id, attempt, env.<NAME> or map.<results|successful|failed|total>)", segs[0])
}

// UsesMap reports whether t references ${map.*}.
func (t Template) UsesMap() bool {
	for _, p := range t.Parts {
		if len(p.Ref) > 0 && p.Ref[0] == RefMap {
			return true
		}
	}
	return false
}

// LookupItemField resolves a path (without the leading "item") in an item's
// JSON. It returns the value's text: strings unquoted, numbers/bools/null as
// written, objects and arrays as compact JSON.
func LookupItemField(item json.RawMessage, path []string) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(item))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("item is not valid JSON: %w", err)
	}
	for i, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			nv, ok := x[seg]
			if !ok {
				return "", fmt.Errorf("item has no field %q", strings.Join(path[:i+1], "."))
			}
			v = nv
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(x) {
				return "", fmt.Errorf("item.%s: index %q out of range (len %d)", strings.Join(path[:i], "."), seg, len(x))
			}
			v = x[n]
		default:
			return "", fmt.Errorf("item has no field %q (item.%s is a scalar)", strings.Join(path[:i+1], "."), strings.Join(path[:i], "."))
		}
	}
	return valueText(v), nil
}

func valueText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// DefaultIDField is the item field used as item id when id_field is unset.
const DefaultIDField = "id"

// ItemIdentity returns the id of the item at index: the value of its
// idField (a string, or a number as written) when the item is an object
// that has it, otherwise the decimal index.
func ItemIdentity(raw json.RawMessage, idField string, index int64) string {
	if idField == "" {
		idField = DefaultIDField
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			if v, ok := m[idField]; ok {
				var s string
				if json.Unmarshal(v, &s) == nil {
					return s
				}
				var n json.Number
				if json.Unmarshal(v, &n) == nil {
					return n.String()
				}
			}
		}
	}
	return strconv.FormatInt(index, 10)
}
