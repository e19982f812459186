// Package jsonnode reads a JSON document into the yaml.Node tree that the
// YAML parser builds, with each node's line, so that pkg/jobspec's one
// converter serves both formats. It owns nothing else.
package jsonnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A JSON document is tokenized by encoding/json and assembled into the
// yaml.Node tree the YAML parser builds, so that one converter (tree.go)
// serves both (pkg/jobspec's tree.go). The YAML parser is not used for JSON, although YAML 1.2 is
// nominally a superset of it: go.yaml.in/yaml/v3 refuses JSON that Python
// and PHP write by default (surrogate pairs such as "\ud83d\ude00", the
// escape "\/"), invalid UTF-8 and raw DEL or C1 characters in strings, and
// a document that starts with a tab; it folds a raw U+0085 in a string
// into a space, and reads 1e400 as a string. See docs/design.md.

// Read reads one JSON value. Nodes carry the line of their first
// character when lines is set, else 0 (a single-line document, as the API
// receives: problems then have no line). A syntax error returns a nil node
// and the problem, with its line and column.
func Read(data []byte, lines bool) (*yaml.Node, *messages.FieldError) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &messages.FieldError{Message: "empty document"}
	}
	r := &jsonReader{data: data, dec: json.NewDecoder(bytes.NewReader(data)), lines: lines}
	r.dec.UseNumber()
	for i, c := range data {
		if c == '\n' {
			r.nl = append(r.nl, i)
		}
	}
	n, err := r.node(0)
	if err != nil {
		return nil, &messages.FieldError{Message: r.syntaxMessage(err)}
	}
	off := r.dec.InputOffset()
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	if off < int64(len(data)) {
		line, col := r.lineCol(off)
		return nil, &messages.FieldError{Message: fmt.Sprintf("invalid JSON at line %d, column %d: unexpected data after the top-level value", line, col)}
	}
	return n, nil
}

// MaxDepth bounds the nesting of a document, so that hostile input cannot
// exhaust the stack (pkg/jobspec applies the same bound to YAML).
const MaxDepth = 1000

type jsonReader struct {
	data  []byte
	dec   *json.Decoder
	nl    []int // offsets of the newlines
	lines bool
}

// node reads the value that starts at the decoder's position.
func (r *jsonReader) node(depth int) (*yaml.Node, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Line: r.tokenLine()}
	switch t := tok.(type) {
	case json.Delim:
		n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for r.dec.More() {
			if n.Kind == yaml.MappingNode {
				key, err := r.dec.Token() // always a string: the decoder checks
				if err != nil {
					return nil, err
				}
				k, _ := key.(string)
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, Line: r.tokenLine()})
			}
			v, err := r.node(depth + 1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := r.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n.Tag, n.Value, n.Style = "!!str", t, yaml.DoubleQuotedStyle
	case json.Number:
		n.Tag, n.Value = "!!float", string(t)
	case bool:
		n.Tag, n.Value = "!!bool", strconv.FormatBool(t)
	case nil:
		n.Tag, n.Value = "!!null", "null"
	}
	return n, nil
}

// tokenLine is the line of the token just read (JSON tokens hold no
// newline), or 0 when lines are not tracked.
func (r *jsonReader) tokenLine() int {
	if !r.lines {
		return 0
	}
	line, _ := r.lineCol(r.dec.InputOffset() - 1)
	return line
}

func (r *jsonReader) lineCol(off int64) (int, int) {
	i, _ := slices.BinarySearch(r.nl, int(off)) // newlines before off
	start := 0
	if i > 0 {
		start = r.nl[i-1] + 1
	}
	return i + 1, int(off) - start + 1
}

func (r *jsonReader) syntaxMessage(err error) string {
	off := r.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
		// Depending on where the decoder failed, Offset is just before or
		// just after the offending character: point at the character.
		// json.SyntaxError has no field for the character, only its message
		// ("invalid character 'x' ..."), so this reads the message.
		msg := se.Error()
		if i := strings.Index(msg, "invalid character '"); i >= 0 && len(msg) > i+20 && msg[i+20] == '\'' {
			c := msg[i+19]
			if off > 0 && off <= int64(len(r.data)) && r.data[off-1] == c {
				off--
			}
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		off = int64(len(r.data))
		err = errors.New("unexpected end of input")
	}
	line, col := r.lineCol(off)
	return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, err)
}

// Scalar is the tree value of a scalar readJSON made: numbers keep
// their text.
func Scalar(n *yaml.Node) any {
	switch n.Tag {
	case "!!str":
		return n.Value
	case "!!bool":
		return n.Value == "true"
	case "!!null":
		return nil
	}
	return json.Number(n.Value)
}
