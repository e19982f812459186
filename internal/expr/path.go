package expr

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Part is one step of a Path: a field name, or an array index when Field
// is empty.
type Part struct {
	Field string
	Index int
}

// Path is a field path: "a.b[2].c".
type Path []Part

// String writes the path back in its source form.
func (p Path) String() string {
	var b strings.Builder
	for i, part := range p {
		switch {
		case part.Field == "":
			fmt.Fprintf(&b, "[%d]", part.Index)
		case i > 0:
			b.WriteString("." + part.Field)
		default:
			b.WriteString(part.Field)
		}
	}
	return b.String()
}

// Lookup resolves a path to a value (nil for JSON null); ok is false when
// the path is not there. Values are those of encoding/json with UseNumber:
// map[string]any, []any, json.Number, string, bool, nil.
type Lookup func(p Path) (v any, ok bool)

// JSON returns a Lookup into the JSON value v. A path whose first field is
// "item" starts at v itself when v has no field named item, so Prodigy's
// `item.score` and `score` name the same field.
func JSON(v any) Lookup {
	return func(p Path) (any, bool) {
		if len(p) > 0 && p[0].Field == "item" {
			if m, ok := v.(map[string]any); !ok || m["item"] == nil {
				if _, has := m["item"]; !has {
					p = p[1:]
				}
			}
		}
		return Get(v, p)
	}
}

// Get returns the value at p in v, and false when it is not there.
func Get(v any, p Path) (any, bool) {
	for _, part := range p {
		if part.Field != "" {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[part.Field]; !ok {
				return nil, false
			}
			continue
		}
		a, ok := v.([]any)
		if !ok || part.Index < 0 || part.Index >= len(a) {
			return nil, false
		}
		v = a[part.Index]
	}
	return v, true
}

// ParsePath parses a field path such as "unified_score.final_score" or
// "results[2].score".
func ParsePath(s string) (Path, error) {
	lx := &lexer{src: s}
	toks, err := lx.all()
	if err != nil {
		return nil, err
	}
	p := &parser{src: s, toks: toks}
	path, err := p.path()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errAt(t, "unexpected %s after the path", t)
	}
	return path, nil
}

// number returns v as a float64 when it is a JSON number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}
