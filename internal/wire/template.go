package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

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
//	${item_index}      the item's 0-based position in the job's input
//	${item_total}      the number of the job's items
//	${map.results_json} ${map.results_file} ${map.success_rate}   (reduce steps)
//	${x:-text}         text when x does not resolve; also ${x|default:text}
//	${x|length}        the value's length; ${x|length:N} at most N
//	${NAME} ${NAME.a}  a variable an earlier step captured (Prodigy's capture:),
//	                   or shell.output / last.output, the previous step's output
//	$${                a literal "${"
//
// A path segment may also be written as an index, a.b[0] for a.b.0.
type Template struct {
	Raw   string
	Parts []TemplatePart
}

// TemplatePart is a literal (Ref == nil) or a reference.
type TemplatePart struct {
	Literal string
	Ref     []string // e.g. ["item", "a", "b"]
	// Default is the text of a reference that does not resolve (a
	// variable no step captured, a missing field, an unset variable):
	// ${x:-text}, Prodigy's form, or ${x|default:text}. Nil: none, the
	// reference is an error then.
	Default *string
	// Length replaces the value by its length (${x|length}): the elements
	// of a JSON array, the members of an object, else the characters of
	// the text. LengthMax, when above 0, caps it (${x|length:100}).
	Length    bool
	LengthMax int
}

// Apply gives the part's value from the reference's resolved value and
// error: the default for an error, when the part has one, and then the
// length when asked.
func (p TemplatePart) Apply(val string, err error) (string, error) {
	if err != nil {
		if p.Default == nil {
			return "", err
		}
		val = *p.Default
	}
	if p.Length {
		n := valueLength(val)
		if p.LengthMax > 0 {
			n = min(n, p.LengthMax)
		}
		val = strconv.Itoa(n)
	}
	return val, nil
}

// valueLength is the length of a value's text: a JSON array's elements, a
// JSON object's members, else its characters.
func valueLength(s string) int {
	if t := strings.TrimSpace(s); len(t) > 0 && (t[0] == '[' || t[0] == '{') {
		var a []json.RawMessage
		if json.Unmarshal([]byte(t), &a) == nil {
			return len(a)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(t), &m) == nil {
			return len(m)
		}
	}
	return utf8.RuneCountInString(s)
}

// Text is the reference in its canonical form: ${a.b}, ${a.b:-x},
// ${a|length}, ${a|length|default:x}.
func (p TemplatePart) Text() string {
	s := "${" + strings.Join(p.Ref, ".")
	if p.Length {
		s += "|length"
		if p.LengthMax > 0 {
			s += ":" + strconv.Itoa(p.LengthMax)
		}
	}
	switch {
	case p.Default != nil && p.Length:
		s += "|default:" + *p.Default
	case p.Default != nil:
		s += ":-" + *p.Default
	}
	return s + "}"
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
	// RefItemIndex is the item's 0-based position in the job's input.
	RefItemIndex = "item_index"
	// RefItemTotal is the number of the job's items.
	RefItemTotal = "item_total"
	// RefShell and RefLast name the previous step's output:
	// ${shell.output} and ${last.output}.
	RefShell = "shell"
	RefLast  = "last"
)

// IsVarRef reports whether ref names a captured variable (Prodigy's
// capture:) rather than one of the namespaces above.
func IsVarRef(ref []string) bool {
	switch ref[0] {
	case RefItem, RefItemID, RefJobID, RefAttempt, RefItemWorkdir, RefMap, RefEnv, RefItemIndex, RefItemTotal, RefShell, RefLast:
		return false
	}
	return true
}

var mapRefs = map[string]bool{"results": true, "successful": true, "failed": true, "total": true,
	MapResultsJSON: true, MapResultsFile: true, MapSuccessRate: true}

// ${map.*} names beyond results, successful, failed and total.
const (
	// MapResultsJSON is ${map.results_json}: the map results' JSON text
	// (Prodigy's ${map.results}); ${map.results_json[0].output} reads into it.
	MapResultsJSON = "results_json"
	// MapResultsFile is ${map.results_file}: the path of the file holding
	// them (jetfleet's ${map.results}).
	MapResultsFile = "results_file"
	// MapSuccessRate is ${map.success_rate}: successful items in percent
	// of the job's items.
	MapSuccessRate = "success_rate"
)

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
		part, err := parsePart(expr)
		if err != nil {
			return Template{}, fmt.Errorf("${%s} at offset %d: %w", expr, i, err)
		}
		if lit.Len() > 0 {
			t.Parts = append(t.Parts, TemplatePart{Literal: lit.String()})
			lit.Reset()
		}
		t.Parts = append(t.Parts, part)
		i += 2 + end + 1
	}
	if lit.Len() > 0 {
		t.Parts = append(t.Parts, TemplatePart{Literal: lit.String()})
	}
	return t, nil
}

// parsePart reads a reference with its default and filters: ${x:-text},
// ${x|default:text}, ${x|length}, ${x|length:N}.
func parsePart(expr string) (TemplatePart, error) {
	var p TemplatePart
	if i := strings.IndexByte(expr, '|'); i >= 0 {
		filters := expr[i+1:]
		expr = strings.TrimSpace(expr[:i])
		for filters != "" {
			f, rest, _ := strings.Cut(filters, "|")
			name, arg, hasArg := strings.Cut(strings.TrimSpace(f), ":")
			switch name {
			case "default":
				d := strings.TrimLeft(filters[strings.IndexByte(filters, ':')+1:], " ")
				if !hasArg {
					return p, fmt.Errorf("the default filter takes its text: |default:text")
				}
				p.Default, rest = &d, "" // the rest of the reference is its text
			case "length":
				p.Length = true
				if hasArg {
					n, err := strconv.Atoi(strings.TrimSpace(arg))
					if err != nil || n < 1 {
						return p, fmt.Errorf("|length:%s: the bound is a number of at least 1", arg)
					}
					p.LengthMax = n
				}
			default:
				return p, fmt.Errorf("unknown filter %q (use |default:text or |length)", name)
			}
			filters = rest
		}
	} else if i := strings.Index(expr, ":-"); i >= 0 {
		d := expr[i+2:]
		p.Default = &d
		expr = strings.TrimSpace(expr[:i])
	}
	ref, err := parseRef(expr)
	p.Ref = ref
	return p, err
}

func parseRef(expr string) ([]string, error) {
	if expr == "" {
		return nil, fmt.Errorf("empty reference")
	}
	segs, err := splitPath(expr)
	if err != nil {
		return nil, err
	}
	switch segs[0] {
	case RefItem:
		return segs, nil
	case RefShell, RefLast:
		if len(segs) != 2 || segs[1] != "output" {
			return nil, fmt.Errorf("the previous step's output is ${%s.output}", segs[0])
		}
		return segs, nil
	case RefItemID, RefJobID, RefAttempt, RefItemWorkdir, RefItemIndex, RefItemTotal:
		if len(segs) != 1 {
			return nil, fmt.Errorf("%s takes no field", segs[0])
		}
		return segs, nil
	case RefMap:
		switch {
		case len(segs) > 2 && segs[1] == MapResultsJSON:
		case len(segs) > 2 && segs[1] == "results":
			segs[1] = MapResultsJSON // a path into the results reads their JSON
		case len(segs) != 2 || !mapRefs[segs[1]]:
			return nil, fmt.Errorf("map references are map.results, map.results_json, map.results_file, map.successful, map.failed, map.total and map.success_rate")
		}
		return segs, nil
	case RefEnv:
		if len(segs) != 2 {
			return nil, fmt.Errorf("env takes one variable name: ${env.NAME}")
		}
		return segs, nil
	}
	if validVarName(segs[0]) {
		return segs, nil // a captured variable: whether a step captures it is the caller's check
	}
	return nil, fmt.Errorf("unknown reference %q (use item, item.<field>, item_id, item_index, item_total, job_id, attempt, item_workdir, env.<NAME>, map.<results|successful|failed|total|success_rate>, or a variable an earlier step captures)", segs[0])
}

// splitPath splits a reference at its dots, reading a[0] as a.0.
func splitPath(expr string) ([]string, error) {
	var segs []string
	for s := expr; ; {
		n := strings.IndexAny(s, ".[")
		name := s
		if n >= 0 {
			name = s[:n]
		}
		if name == "" {
			return nil, fmt.Errorf("empty path segment")
		}
		if strings.IndexByte(name, ']') >= 0 {
			return nil, fmt.Errorf("malformed index in %q (write a[0])", expr)
		}
		segs = append(segs, name)
		if n < 0 {
			return segs, nil
		}
		for s = s[n:]; strings.HasPrefix(s, "["); {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, fmt.Errorf("malformed index in %q (write a[0])", expr)
			}
			if _, err := strconv.ParseUint(s[1:end], 10, 31); err != nil {
				return nil, fmt.Errorf("malformed index in %q: %q is not an array index", expr, s[1:end])
			}
			segs = append(segs, s[1:end])
			s = s[end+1:]
		}
		if s == "" {
			return segs, nil
		}
		if s[0] != '.' {
			return nil, fmt.Errorf("malformed index in %q (write a[0].b)", expr)
		}
		s = s[1:]
	}
}

// validVarName: a letter or _, then letters, digits, _ or -.
func validVarName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case i > 0 && (c == '-' || c >= '0' && c <= '9'):
		default:
			return false
		}
	}
	return s != ""
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
			s, err := p.Apply(LookupItemField(v.Item, p.Ref[1:]))
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
