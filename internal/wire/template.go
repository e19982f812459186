package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// Template is a parsed string with ${...} references, as used in shell
// steps and group_by. Grammar:
//
//	${item}            the whole item (JSON text, or the scalar itself)
//	${item.a.b}        field b of field a; a numeric segment indexes an array
//	${item_id} ${job_id} ${attempt}
//	${map.results} ${map.successful} ${map.failed} ${map.total}   (reduce steps)
//	${env.NAME}        a variable of the step's environment (never the agent's own)
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
	// RefItemWorkdir is the directory the item's shell steps run in.
	RefItemWorkdir = "item_workdir"
	RefMap         = "map"
	RefEnv         = "env"
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
	case RefItemID, RefJobID, RefAttempt, RefItemWorkdir:
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
	return nil, fmt.Errorf("unknown reference %q (use item, item.<field>, item_id, job_id, attempt, item_workdir, env.<NAME> or map.<results|successful|failed|total>)", segs[0])
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
// written, objects and arrays as compact JSON with their keys in the
// original order (the same bytes as ITEM_JSON, minus insignificant space).
func LookupItemField(item json.RawMessage, path []string) (string, error) {
	if !jsonscan.Valid(item) {
		return "", fmt.Errorf("item is not valid JSON")
	}
	cur := bytes.TrimSpace(item)
	for i, seg := range path {
		where := "item"
		if i > 0 {
			where = "item." + strings.Join(path[:i], ".")
		}
		switch {
		case len(cur) > 0 && cur[0] == '{':
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cur, &m); err != nil {
				return "", fmt.Errorf("%s: %w", where, err)
			}
			nv, ok := m[seg]
			if !ok {
				return "", fmt.Errorf("item has no field %q", strings.Join(path[:i+1], "."))
			}
			cur = bytes.TrimSpace(nv)
		case len(cur) > 0 && cur[0] == '[':
			var a []json.RawMessage
			if err := json.Unmarshal(cur, &a); err != nil {
				return "", fmt.Errorf("%s: %w", where, err)
			}
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(a) || seg[0] == '+' {
				return "", fmt.Errorf("%s: index %q out of range (len %d)", where, seg, len(a))
			}
			cur = bytes.TrimSpace(a[n])
		default:
			return "", fmt.Errorf("item has no field %q (%s is a scalar)", strings.Join(path[:i+1], "."), where)
		}
	}
	return rawText(cur), nil
}

// rawText is the text of a JSON value: strings unquoted, others compacted.
func rawText(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// TemplateVars are the values Render resolves ${...} references to.
type TemplateVars struct {
	Item    json.RawMessage
	ItemID  string
	JobID   string
	Attempt int
}

// Render expands t with plain text for each reference: ${item.x} is the
// field's text (LookupItemField), ${item_id}, ${job_id}, ${attempt}; esc,
// when set, escapes every reference's value given the text rendered
// before it (URLEscape), never the literal text. ${env.*} and ${map.*}
// are errors.
func (t Template) Render(v TemplateVars, esc func(before, value string) string) (string, error) {
	var b strings.Builder
	for _, p := range t.Parts {
		if p.Ref == nil {
			b.WriteString(p.Literal)
			continue
		}
		var val string
		switch p.Ref[0] {
		case RefItem:
			s, err := LookupItemField(v.Item, p.Ref[1:])
			if err != nil {
				return "", fmt.Errorf("${%s}: %w", strings.Join(p.Ref, "."), err)
			}
			val = s
		case RefItemID:
			val = v.ItemID
		case RefJobID:
			val = v.JobID
		case RefAttempt:
			val = strconv.Itoa(v.Attempt)
		default:
			return "", fmt.Errorf("${%s} is not available here (use item, item.<field>, item_id, job_id or attempt)", strings.Join(p.Ref, "."))
		}
		if esc != nil {
			val = esc(b.String(), val)
		}
		b.WriteString(val)
	}
	return b.String(), nil
}

// URLEscape escapes a value landing in a URL after before: in the query
// or fragment (after '?' or '#') with url.QueryEscape, in the path with
// url.PathEscape.
// A whole path segment "." or ".." is escaped too, so that a value
// never climbs the path.
func URLEscape(before, value string) string {
	if strings.ContainsAny(before, "?#") {
		return url.QueryEscape(value)
	}
	if value == "." || value == ".." {
		return strings.ReplaceAll(value, ".", "%2E")
	}
	return url.PathEscape(value)
}
