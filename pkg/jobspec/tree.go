package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const (
	// maxDepth bounds the nesting of a document, so that hostile input
	// cannot exhaust the stack of the recursive walkers.
	maxDepth = jsonnode.MaxDepth
	// linesMaxDepth bounds the paths whose lines are recorded; deeper
	// paths can only be free-form data (item contents, handler arguments).
	linesMaxDepth = 12
)

// A tree is a document converted to what the decoder walks: map[string]any,
// []any, string, bool, nil, json.Number, json.RawMessage for an inline item
// (its JSON, keys in the document's order), and invalidValue where a value
// could not be converted.
type tree struct {
	value any
	// lines maps field paths to their 1-based source lines (empty for a
	// single-line JSON document).
	lines map[string]int
	// problems are the document's own: duplicate and non-string keys, bad
	// merges. A nil value with problems is a document that could not be read.
	problems []messages.FieldError
}

// invalidValue stands in a tree for a value the converter could not
// convert (a YAML custom tag, an infinity): the decoder reports problem at
// the value's path and treats the field as given but unusable, so that
// validation does not also report it missing.
type invalidValue struct {
	problem string
}

// readTree reads data as one JSON value (asJSON) or one YAML document.
func readTree(data []byte, asJSON bool) tree {
	if asJSON {
		// Compact JSON (the API's form) gets no lines.
		root, fe := jsonnode.Read(data, bytes.IndexByte(bytes.TrimSpace(data), '\n') >= 0)
		if fe != nil {
			return tree{problems: []messages.FieldError{*fe}}
		}
		return convert(root, true, len(data))
	}
	root, fe := readYAML(data)
	if fe != nil {
		return tree{problems: []messages.FieldError{*fe}}
	}
	return convert(root, false, len(data))
}

// converter walks a yaml.Node tree.
type converter struct {
	// json is set for a tree jsonnode.Read made: its scalars are JSON's, and the
	// values of duplicate keys are walked for their own problems.
	json     bool
	lines    map[string]int
	problems []messages.FieldError
	// nodes counts the nodes visited, aliases expanded; it is bounded so
	// that an alias bomb cannot blow up time or memory.
	nodes, maxNodes int
	exhausted       bool
	// ordered is set while converting an inline item: mappings become
	// orderedMaps, so the item's JSON keeps the document's key order.
	ordered bool
}

// convert converts the node tree of a document of size bytes.
func convert(root *yaml.Node, asJSON bool, size int) tree {
	c := &converter{json: asJSON, lines: map[string]int{}, maxNodes: 10*size + 10000}
	v := c.node("", root, 0, true)
	if c.exhausted {
		return tree{problems: []messages.FieldError{{Message: fmt.Sprintf("document too large: more than %d values after expanding aliases", c.maxNodes)}}}
	}
	return tree{value: v, lines: c.lines, problems: c.problems}
}

// go.yaml.in/yaml/v3 has no error type that carries a problem's line or
// its message: its errors are plain, their text "yaml: line N: message"
// or "yaml: message". yamlErrLine and yamlMessage are the one place that
// reads that text.
var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlMessage is a yaml error's text without the package's "yaml: ".
func yamlMessage(err error) string { return strings.TrimPrefix(err.Error(), "yaml: ") }

// readYAML parses one YAML document. A syntax error returns a nil node
// and the problem.
func readYAML(data []byte) (*yaml.Node, *messages.FieldError) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	fail := func(err error) (*yaml.Node, *messages.FieldError) {
		fe := &messages.FieldError{Message: "invalid YAML: " + yamlMessage(err)}
		if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Message = "invalid YAML: " + m[2]
		}
		return nil, fe
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := safeDecode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &messages.FieldError{Message: "empty document"}
		}
		return fail(err)
	}
	var next yaml.Node
	switch err := safeDecode(dec, &next); {
	case err == nil:
		return nil, &messages.FieldError{Line: next.Line, Message: "expected a single YAML document, found another after '---'"}
	case !errors.Is(err, io.EOF):
		return fail(err)
	}
	return &doc, nil
}

// safeDecode turns a panic of the YAML parser into an error.
func safeDecode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failure: %v", r)
		}
	}()
	return dec.Decode(n)
}

func (c *converter) addf(path string, line int, format string, args ...any) {
	c.problems = append(c.problems, messages.FieldError{Field: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (c *converter) record(path string, line, depth int) {
	if depth > linesMaxDepth || line == 0 {
		return
	}
	if _, ok := c.lines[path]; !ok {
		c.lines[path] = line
	}
}

// node converts n found at path. record says whether lines are recorded
// under it (not inside items or handler arguments).
func (c *converter) node(path string, n *yaml.Node, depth int, record bool) any {
	c.nodes++
	if c.nodes > c.maxNodes {
		c.exhausted = true
		return nil
	}
	if c.exhausted {
		return nil
	}
	if depth > maxDepth {
		return invalid("nested deeper than %d levels", maxDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return c.node(path, n.Content[0], depth, record)
	case yaml.AliasNode:
		if n.Alias == nil {
			return invalid("unknown alias %q", n.Value)
		}
		return c.node(path, n.Alias, depth+1, record)
	case yaml.ScalarNode:
		if c.json {
			return jsonnode.Scalar(n)
		}
		return scalar(n)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			return invalid("unsupported YAML tag %s", tag)
		}
		s := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			ip := messages.IndexPath(path, i)
			if record {
				c.record(ip, e.Line, depth+1)
			}
			if path == "items" || path == "map.items" { // inline items keep their bytes
				s = append(s, c.item(ip, e, depth+1))
				continue
			}
			s = append(s, c.node(ip, e, depth+1, record))
		}
		return s
	case yaml.MappingNode:
		if tag := n.ShortTag(); tag != "!!map" {
			return invalid("unsupported YAML tag %s", tag)
		}
		return c.mapping(path, n, depth, record)
	}
	return invalid("unsupported YAML node")
}

// item converts an inline item to JSON bytes that keep the document's key
// order (no lines are recorded inside: item contents are free-form data).
// An item holding a value that cannot be converted is returned as a plain
// tree, for the decoder to report the value's path.
func (c *converter) item(path string, n *yaml.Node, depth int) any {
	c.ordered = true
	v := c.node(path, n, depth, false)
	c.ordered = false
	var b bytes.Buffer
	if writeOrdered(&b, v) {
		return json.RawMessage(b.Bytes())
	}
	return plain(v)
}

// orderedMap is a mapping that remembers its key order (inside items).
type orderedMap struct {
	keys []string
	m    map[string]any
}

// writeOrdered writes v as JSON, mappings in key order; it reports false
// when v holds an invalidValue.
func writeOrdered(b *bytes.Buffer, v any) bool {
	switch x := v.(type) {
	case orderedMap:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if !writeOrdered(b, x.m[k]) {
				return false
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeOrdered(b, e) {
				return false
			}
		}
		b.WriteByte(']')
	case string:
		writeString(b, x)
	case json.Number:
		b.WriteString(string(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case nil:
		b.WriteString("null")
	default:
		return false
	}
	return true
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// plain turns ordered maps back into maps.
func plain(v any) any {
	switch x := v.(type) {
	case orderedMap:
		m := make(map[string]any, len(x.m))
		for k, e := range x.m {
			m[k] = plain(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = plain(e)
		}
	}
	return v
}

// mapping converts a mapping node: a map[string]any, or an orderedMap
// inside items.
func (c *converter) mapping(path string, n *yaml.Node, depth int, record bool) any {
	m := map[string]any{}
	var keys []string
	keyLine := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		for kn.Kind == yaml.AliasNode && kn.Alias != nil {
			kn = kn.Alias
		}
		if kn.Kind != yaml.ScalarNode {
			c.addf(path, kn.Line, "mapping keys must be strings, got a %s", kindName(kn))
			continue
		}
		switch tag := kn.ShortTag(); tag {
		case "!!str":
		case "!!int": // Prodigy's on_exit_code: {101: ...}
			if !strings.HasSuffix(path, "on_exit_code") {
				c.addf(messages.JoinPath(path, kn.Value), kn.Line, "mapping key %s is a %s, not a string (quote it)", kn.Value, tag)
				continue
			}
		case "!!merge":
			merges = append(merges, vn)
			continue
		default:
			c.addf(messages.JoinPath(path, kn.Value), kn.Line, "mapping key %s is a %s, not a string (quote it)", kn.Value, tag)
			continue
		}
		k := kn.Value
		kp := messages.JoinPath(path, k)
		if first, dup := keyLine[k]; dup {
			if c.json {
				// encoding/json, which read JSON before, went on into the
				// value: its own duplicates are reported too.
				c.node(kp, vn, depth+1, record && k != "with")
			}
			if first == 0 {
				c.addf(kp, 0, "duplicate key")
			} else {
				c.addf(kp, kn.Line, "duplicate key (first at line %d)", first)
			}
			continue
		}
		keyLine[k] = kn.Line
		if record {
			c.record(kp, kn.Line, depth+1)
		}
		// Handler arguments are free-form data: no lines inside.
		m[k] = c.node(kp, vn, depth+1, record && k != "with")
		keys = append(keys, k)
	}
	// Merge keys (<<: *base, or a list of them): explicit keys win, then
	// earlier merges over later ones.
	for _, mn := range merges {
		srcs := []*yaml.Node{mn}
		if mn.Kind == yaml.SequenceNode {
			srcs = mn.Content
		}
		for _, src := range srcs {
			v := c.node(path, src, depth+1, record)
			var mm map[string]any
			var mkeys []string
			switch x := v.(type) {
			case map[string]any:
				mm, mkeys = x, sortedKeys(x)
			case orderedMap:
				mm, mkeys = x.m, x.keys
			default:
				c.addf(path, src.Line, "a merge key (<<) needs a mapping or a list of mappings")
				continue
			}
			for _, k := range mkeys {
				if _, exists := m[k]; !exists {
					m[k] = mm[k]
					keys = append(keys, k)
				}
			}
		}
	}
	if c.ordered {
		return orderedMap{keys: keys, m: m}
	}
	return m
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// invalid stands for a value that could not be converted; the decoder
// reports the problem at the value's path.
func invalid(format string, args ...any) invalidValue {
	return invalidValue{problem: fmt.Sprintf(format, args...)}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return "node"
}

// scalar resolves a scalar by its YAML 1.2 tag. Numbers become json.Number,
// keeping their text when it is JSON number syntax, so that YAML and JSON
// give identical values; timestamps stay strings.
func scalar(n *yaml.Node) any {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp", "!!binary":
		return n.Value
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return invalid("%s", yamlMessage(err))
		}
		return b
	case "!!int":
		var v any
		if err := n.Decode(&v); err != nil {
			return invalid("%s", yamlMessage(err))
		}
		if jsonNumber(n.Value) {
			return json.Number(n.Value)
		}
		switch x := v.(type) {
		case int:
			return json.Number(strconv.Itoa(x))
		case int64:
			return json.Number(strconv.FormatInt(x, 10))
		case uint64:
			return json.Number(strconv.FormatUint(x, 10))
		case float64:
			return floatNumber(n, x)
		}
		return invalid("cannot read %q as an integer", n.Value)
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return invalid("%s", yamlMessage(err))
		}
		return floatNumber(n, f)
	default:
		return invalid("unsupported YAML tag %s", tag)
	}
}

func floatNumber(n *yaml.Node, f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return invalid("%s is not a finite number (JSON has no NaN or infinity)", n.Value)
	}
	if jsonNumber(n.Value) {
		return json.Number(n.Value)
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}

// jsonNumber reports whether s is JSON number syntax.
func jsonNumber(s string) bool {
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
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
