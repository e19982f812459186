package ui

import (
	"bytes"
	"encoding/json"
	"strings"
)

// prettyJSON indents a JSON document for reading, keeping the order of
// its keys, and shows "<", ">" and "&" as themselves rather than as the
// \u003c escapes Go's encoder writes (the page escapes them for HTML).
// A value that is not JSON is returned as it is.
func prettyJSON(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	type frame struct {
		obj   bool
		n     int  // values (or keys) written in this container
		inKey bool // an object's next token is a key
	}
	var stack []frame
	indent := func() {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", len(stack)))
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			if len(stack) == 0 && b.Len() > 0 {
				return b.String()
			}
			return string(raw)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.n > 0 {
				indent()
			}
			b.WriteRune(rune(d))
			if len(stack) > 0 {
				stack[len(stack)-1].inKey = stack[len(stack)-1].obj
			}
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if !top.obj || top.inKey {
				if top.n > 0 {
					b.WriteByte(',')
				}
				indent()
				top.n++
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, frame{obj: v == '{', inKey: v == '{'})
			continue
		case string:
			var sb bytes.Buffer
			enc := json.NewEncoder(&sb)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(v)
			b.WriteString(strings.TrimSuffix(sb.String(), "\n"))
		case json.Number:
			b.WriteString(v.String())
		case bool:
			if v {
				b.WriteString("true")
			} else {
				b.WriteString("false")
			}
		case nil:
			b.WriteString("null")
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.obj {
				if top.inKey {
					b.WriteString(": ")
				}
				top.inKey = !top.inKey
			}
		}
		if len(stack) == 0 && dec.More() {
			return string(raw) // more than one value
		}
	}
}
