package oldmessages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// A generic tree is what DecodeJobSpec walks: map[string]any, []any,
// string, bool, nil, and numbers as json.Number, float64, float32, or any
// signed or unsigned integer type. encoding/json (with or without UseNumber)
// and package jobspec produce such trees. A json.RawMessage stands for the
// JSON value it holds; inline items given that way keep their bytes.

// InvalidValue stands in a generic tree for a value its producer could
// not convert (a YAML custom tag, an infinity): DecodeJobSpec reports
// Problem at the value's path and treats the field as given but unusable,
// so that validation does not also report it missing.
type InvalidValue struct {
	Problem string
}

// maxTreeDepth bounds the nesting of a document, so that hostile input
// cannot exhaust the stack of the recursive walkers.
const maxTreeDepth = 1000

// linesMaxDepth bounds the paths whose source lines are recorded: deeper
// paths can only be free-form data (item contents, handler arguments).
const linesMaxDepth = 12

// JoinPath appends a field name to a path ("" is the document).
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// IndexPath appends an array index to a path.
func IndexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// parentPath returns the path one level up, and false for the document.
func parentPath(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i], true
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i], true
	}
	return "", true
}

// under reports whether path p is base or inside it.
func under(p, base string) bool {
	if base == "" || p == base {
		return true
	}
	return strings.HasPrefix(p, base) && len(p) > len(base) && (p[len(base)] == '.' || p[len(base)] == '[')
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func isNumber(v any) bool {
	switch v.(type) {
	case json.Number, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	}
	return false
}

// numberText writes a tree number as JSON number text.
func numberText(v any) string {
	switch x := v.(type) {
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case int:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint:
		return strconv.FormatUint(uint64(x), 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return fmt.Sprint(v)
}

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
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	if isNumber(v) {
		return "number " + numberText(v)
	}
	return fmt.Sprintf("unsupported value of type %T", v)
}

var errNotNumber = errors.New("not a number")

// asInt converts a tree number to an int64; integral floats are accepted.
func asInt(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint, uint8, uint16, uint32, uint64:
		u, _ := strconv.ParseUint(numberText(x), 10, 64)
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("number %d is too large", u)
		}
		return int64(u), nil
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n, nil
		}
	}
	if !isNumber(v) {
		return 0, fmt.Errorf("expected an integer, got %s", describe(v))
	}
	f, err := asFloat(v)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("expected an integer, got %s", describe(v))
	}
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("number %s is out of range", numberText(v))
	}
	return int64(f), nil
}

// asFloat converts a tree number to a finite float64.
func asFloat(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case json.Number:
		var err error
		f, err = strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, fmt.Errorf("number %s is out of range", x)
		}
	default:
		if !isNumber(v) {
			return 0, fmt.Errorf("expected a number, got %s: %w", describe(v), errNotNumber)
		}
		f, _ = strconv.ParseFloat(numberText(v), 64)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("number %s is not finite", numberText(v))
	}
	return f, nil
}

// validNumber reports whether s is JSON number syntax.
func validNumber(s string) bool {
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// normalize converts the tree value at path into plain JSON data: maps,
// slices, strings, bools, nil and json.Number numbers. It rejects what JSON
// cannot hold (NaN, infinities, other Go types), with the path of the
// offending value.
func normalize(path string, v any, depth int) (any, *FieldError) {
	if depth > maxTreeDepth {
		return nil, &FieldError{Field: path, Message: fmt.Sprintf("nested deeper than %d levels", maxTreeDepth)}
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case json.Number:
		if !validNumber(string(x)) {
			return nil, &FieldError{Field: path, Message: fmt.Sprintf("invalid number %q", string(x))}
		}
		return x, nil
	case map[string]any:
		m := make(map[string]any, len(x))
		for _, k := range sortedKeys(x) {
			n, err := normalize(JoinPath(path, k), x[k], depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, nil
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			n, err := normalize(IndexPath(path, i), e, depth+1)
			if err != nil {
				return nil, err
			}
			s[i] = n
		}
		return s, nil
	case float64, float32:
		if _, err := asFloat(x); err != nil {
			return nil, &FieldError{Field: path, Message: err.Error()}
		}
		return json.Number(numberText(x)), nil
	case InvalidValue:
		return nil, &FieldError{Field: path, Message: x.Problem}
	case json.RawMessage:
		dec := json.NewDecoder(bytes.NewReader(x))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, &FieldError{Field: path, Message: "invalid JSON: " + err.Error()}
		}
		return normalize(path, v, depth)
	}
	if isNumber(v) {
		return json.Number(numberText(v)), nil
	}
	return nil, &FieldError{Field: path, Message: fmt.Sprintf("unsupported value of type %T", v)}
}

// canonicalJSON encodes normalized data with sorted keys and without HTML
// escaping.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// CompactJSON re-encodes one JSON value without insignificant space,
// keeping its key order and number spelling, and writing strings without
// HTML escaping ("<" stays "<"): the form inline items take in a decoded
// spec, so that a marshalled spec decodes back to identical bytes.
func CompactJSON(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out, sb bytes.Buffer
	out.Grow(len(data))
	senc := json.NewEncoder(&sb)
	senc.SetEscapeHTML(false)
	type frame struct {
		obj bool
		n   int
	}
	var stack []frame
	sep := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		switch {
		case top.obj && top.n%2 == 1:
			out.WriteByte(':')
		case top.n > 0:
			out.WriteByte(',')
		}
		top.n++
	}
	values := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(stack) == 0 {
			if values++; values > 1 {
				return nil, errors.New("more than one JSON value")
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				sep()
				out.WriteByte(byte(t))
				stack = append(stack, frame{obj: t == '{'})
			} else {
				out.WriteByte(byte(t))
				stack = stack[:len(stack)-1]
			}
		case string:
			sep()
			sb.Reset()
			if err := senc.Encode(t); err != nil {
				return nil, err
			}
			out.Write(bytes.TrimSuffix(sb.Bytes(), []byte("\n")))
		case json.Number:
			sep()
			out.WriteString(string(t))
		case bool:
			sep()
			out.WriteString(strconv.FormatBool(t))
		case nil:
			sep()
			out.WriteString("null")
		}
	}
	if values == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	return out.Bytes(), nil
}

// jsonTree decodes JSON text into a generic tree with json.Number numbers.
// Duplicate keys are problems (the first value is kept); when lines is
// non-nil it records the 1-based line of every field path.
type jsonTree struct {
	data     []byte
	dec      *json.Decoder
	nl       []int
	lines    map[string]int
	problems []FieldError
}

// parseJSONTree parses data. A syntax error returns a nil tree and a
// single problem; duplicate keys are returned as problems with the tree.
func parseJSONTree(data []byte, trackLines bool) (tree any, lines map[string]int, problems []FieldError) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	t := &jsonTree{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	t.dec.UseNumber()
	for i, c := range data {
		if c == '\n' {
			t.nl = append(t.nl, i)
		}
	}
	if trackLines {
		t.lines = map[string]int{}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, []FieldError{{Message: "empty document"}}
	}
	v, err := t.value("", 0, true)
	if err != nil {
		return nil, nil, []FieldError{{Message: t.syntaxMessage(err)}}
	}
	off := t.dec.InputOffset()
	for off < int64(len(data)) && (data[off] == ' ' || data[off] == '\t' || data[off] == '\r' || data[off] == '\n') {
		off++
	}
	if off < int64(len(data)) {
		line, col := t.lineCol(off)
		return nil, nil, []FieldError{{Message: fmt.Sprintf("invalid JSON at line %d, column %d: unexpected data after the top-level value", line, col)}}
	}
	return v, t.lines, t.problems
}

func (t *jsonTree) syntaxMessage(err error) string {
	off := t.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
		// Depending on where the decoder failed, Offset is just before or
		// just after the offending character: point at the character.
		msg := se.Error()
		if i := strings.Index(msg, "invalid character '"); i >= 0 && len(msg) > i+20 && msg[i+20] == '\'' {
			c := msg[i+19]
			if off > 0 && off <= int64(len(t.data)) && t.data[off-1] == c {
				off--
			}
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		off = int64(len(t.data))
		err = errors.New("unexpected end of input")
	}
	line, col := t.lineCol(off)
	return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, err)
}

func (t *jsonTree) lineCol(off int64) (int, int) {
	i := sort.SearchInts(t.nl, int(off))
	start := 0
	if i > 0 {
		start = t.nl[i-1] + 1
	}
	return i + 1, int(off) - start + 1
}

// nextOffset is the offset of the next token after the decoder's offset.
func (t *jsonTree) nextOffset() int64 {
	off := t.dec.InputOffset()
	for off < int64(len(t.data)) {
		switch t.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (t *jsonTree) lineAt(off int64) int {
	l, _ := t.lineCol(off)
	return l
}

func (t *jsonTree) record(path string, line int, depth int) {
	if t.lines == nil || depth > linesMaxDepth {
		return
	}
	if _, ok := t.lines[path]; !ok {
		t.lines[path] = line
	}
}

func (t *jsonTree) value(path string, depth int, record bool) (any, error) {
	if depth > maxTreeDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxTreeDepth)
	}
	tok, err := t.dec.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch delim {
	case '{':
		m := map[string]any{}
		var keyLine map[string]int
		for t.dec.More() {
			kt, err := t.dec.Token()
			if err != nil {
				return nil, err
			}
			k, ok := kt.(string)
			if !ok {
				return nil, fmt.Errorf("object key is %v, not a string", kt)
			}
			line, _ := t.lineCol(t.dec.InputOffset() - 1)
			kp := JoinPath(path, k)
			if record {
				t.record(kp, line, depth+1)
			}
			// Handler arguments are free-form data: no lines inside.
			v, err := t.value(kp, depth+1, record && k != "with")
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				fe := FieldError{Field: kp, Message: "duplicate key"}
				if first, ok := keyLine[k]; ok && t.lines != nil {
					fe.Message = fmt.Sprintf("duplicate key (first at line %d)", first)
					fe.Line = line
				}
				t.problems = append(t.problems, fe)
				continue
			}
			m[k] = v
			if keyLine == nil {
				keyLine = map[string]int{}
			}
			keyLine[k] = line
		}
		if _, err := t.dec.Token(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		s := []any{}
		for i := 0; t.dec.More(); i++ {
			ip := IndexPath(path, i)
			start := t.nextOffset()
			if record {
				t.record(ip, t.lineAt(start), depth+1)
			}
			// Item contents are free-form data: no lines inside.
			v, err := t.value(ip, depth+1, record && path != "items")
			if err != nil {
				return nil, err
			}
			if path == "items" {
				// An inline item keeps its own bytes (and key order).
				v = json.RawMessage(t.data[start:t.dec.InputOffset()])
			}
			s = append(s, v)
		}
		if _, err := t.dec.Token(); err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("unexpected %v", delim)
}
