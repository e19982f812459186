package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// DefaultIDField is the item field used as item id when id_field is unset.
const DefaultIDField = "id"

// ItemIdentity returns the id of the item at index: the value of its
// idField (a string, or a number as written) when the item is an object
// that has it, otherwise the decimal index.
//
// It is called twice per item of every job (counting, publishing), so it
// finds the field with a scan of the object's top level rather than by
// decoding the object into a map; what it returns is exactly what that
// decoding gives (FuzzItemIdentity checks it against the map).
func ItemIdentity(raw json.RawMessage, idField string, index int64) string {
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '{' && !jsonscan.Valid(raw) {
		return strconv.FormatInt(index, 10)
	}
	return ValidItemIdentity(raw, idField, index)
}

// ValidItemIdentity is ItemIdentity for raw known to be valid JSON, such
// as an item a reader of inputs has just checked: it does not check again.
func ValidItemIdentity(raw json.RawMessage, idField string, index int64) string {
	if idField == "" {
		idField = DefaultIDField
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		if v, ok := topLevelField(raw, idField); ok {
			if id, ok := identityValue(v); ok {
				return id
			}
		}
	}
	return strconv.FormatInt(index, 10)
}

// identityValue is an id field's value: a string, or a number as written.
func identityValue(v []byte) (string, bool) {
	if v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && isASCII(v) {
		return string(v[1 : len(v)-1]), true // nothing to unescape or replace
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), true
	}
	return "", false
}

// topLevelField returns the value of key in obj, a valid JSON object, as
// decoding it into a map would: the last of duplicate keys, keys compared
// once unescaped.
func topLevelField(obj []byte, key string) (value []byte, found bool) {
	i := jsonscan.SkipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		end := jsonscan.SkipString(obj, i)
		k := obj[i:end]
		i = jsonscan.SkipSpace(obj, end)
		i = jsonscan.SkipSpace(obj, i+1) // past ':'
		vend := jsonscan.SkipValue(obj, i)
		if keyEquals(k, key) {
			value, found = obj[i:vend], true
		}
		i = jsonscan.SkipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = jsonscan.SkipSpace(obj, i+1)
		}
	}
	return value, found
}

// keyEquals compares a quoted JSON key with key.
func keyEquals(quoted []byte, key string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 && isASCII(quoted) {
		return string(quoted[1:len(quoted)-1]) == key
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == key
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// ShellCommand is one shell command of a job spec, with its field path.
type ShellCommand struct {
	// Field is the command's path, e.g. "agent_template[0].shell" or
	// "reduce[1].retry_config.on_failure.fallback.command".
	Field string
	// Command is the template as written.
	Command string
}

// ShellCommands lists every shell command of s that an agent runs: the
// steps of agent_template and reduce, their fallback commands, and a custom
// on_item_failure step. Empty commands are left out.
func (s *JobSpec) ShellCommands() []ShellCommand {
	var out []ShellCommand
	step := func(p string, st *Step) {
		if st.Shell != "" {
			out = append(out, ShellCommand{Field: JoinPath(p, "shell"), Command: st.Shell})
		}
		if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil && rc.OnFailure.Fallback != "" {
			out = append(out, ShellCommand{Field: JoinPath(p, "retry_config.on_failure.fallback.command"), Command: rc.OnFailure.Fallback})
		}
	}
	for i := range s.AgentTemplate {
		step(IndexPath("agent_template", i), &s.AgentTemplate[i])
	}
	for i := range s.Reduce {
		step(IndexPath("reduce", i), &s.Reduce[i])
	}
	if ep := s.ErrorPolicy; ep != nil && ep.OnItemFailure != nil && ep.OnItemFailure.Custom != nil {
		step("error_policy.on_item_failure.custom", ep.OnItemFailure.Custom)
	}
	return out
}
