package expand

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// readBufferSize is the read size under the JSON decoder.
const readBufferSize = 64 << 10

// streamIter yields the elements of the array selected by a streamable
// json_path, decoding one element at a time: memory holds one item (plus
// read buffers), whatever the size of the input.
type streamIter struct {
	ref  string
	q    *query
	rc   io.ReadCloser
	tr   *trackReader
	dec  *json.Decoder
	n    int64 // elements returned so far
	done bool
}

// newStreamIter reads the input up to the start of the selected array and
// reports a path that is not there.
func newStreamIter(ref string, q *query, rc io.ReadCloser) (*streamIter, error) {
	tr := &trackReader{r: bufio.NewReaderSize(rc, readBufferSize)}
	it := &streamIter{ref: ref, q: q, rc: rc, tr: tr, dec: json.NewDecoder(tr)}
	if err := it.descend(); err != nil {
		return nil, err
	}
	return it, nil
}

func (it *streamIter) pathErr(kind error, format string, args ...any) error {
	return errorf(kind, "input %s: json_path %s: %s", it.ref, it.q.expr, fmt.Sprintf(format, args...))
}

// token reads the next token; sep is what may precede it (for error
// location).
func (it *streamIter) token(sep byte) (json.Token, error) {
	start := it.dec.InputOffset()
	tok, err := it.dec.Token()
	if err != nil {
		return nil, malformed(it.ref, it.tr, err, start, sep, -1)
	}
	return tok, nil
}

func (it *streamIter) descend() error {
	names := it.q.names
	start := it.dec.InputOffset()
	tok, err := it.dec.Token()
	if err == io.EOF {
		return &SyntaxError{Ref: it.ref, Offset: it.tr.n, Item: -1, Msg: "empty input: no JSON value"}
	}
	if err != nil {
		return malformed(it.ref, it.tr, err, start, sepNone, -1)
	}
	for i, name := range names {
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			return it.pathErr(ErrPathNotFound, "no field %q: %s is %s, not an object", name, location(names, i), describe(tok))
		}
		found := false
		for sep := byte(sepFirstKey); it.dec.More(); sep = sepKey {
			key, err := it.token(sep)
			if err != nil {
				return err
			}
			if key == name {
				found = true
				break
			}
			if err := it.skip(); err != nil {
				return err
			}
		}
		if !found {
			// Read the closing brace: a truncated or malformed object is
			// reported as such rather than as a missing field.
			if _, err := it.token(sepDelim); err != nil {
				return err
			}
			return it.pathErr(ErrPathNotFound, "no field %q in %s", name, location(names, i))
		}
		if tok, err = it.token(sepAny); err != nil {
			return err
		}
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return it.pathErr(ErrNotArray, "%s is %s, not an array", location(names, len(names)), describe(tok))
	}
	return nil
}

// skip reads past the value whose first token comes next, token by token,
// so a large value that is not on the path is never held in memory.
func (it *streamIter) skip() error {
	depth := 0
	for {
		tok, err := it.token(sepAny)
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// next returns the next element of the array, or io.EOF after the last one
// once the rest of the document has been checked.
func (it *streamIter) next() (json.RawMessage, error) {
	if it.done {
		return nil, io.EOF
	}
	if !it.dec.More() {
		if _, err := it.token(sepDelim); err != nil { // the closing ']'
			return nil, err
		}
		if err := it.finish(); err != nil {
			return nil, err
		}
		it.done = true
		return nil, io.EOF
	}
	start := it.dec.InputOffset()
	var raw json.RawMessage
	if err := it.dec.Decode(&raw); err != nil {
		sep := byte(sepNone)
		if it.n > 0 {
			sep = sepComma
		}
		return nil, malformed(it.ref, it.tr, err, start, sep, it.n)
	}
	it.n++
	return raw, nil
}

// finish reads the rest of the objects enclosing the array, checking their
// syntax and that no field on the path appears twice, then checks that
// nothing but whitespace follows the document.
func (it *streamIter) finish() error {
	names := it.q.names
	for i := len(names) - 1; i >= 0; i-- {
		for it.dec.More() {
			key, err := it.token(sepKey)
			if err != nil {
				return err
			}
			if key == names[i] {
				return it.pathErr(ErrDuplicateField, "field %q appears more than once in %s", names[i], location(names, i))
			}
			if err := it.skip(); err != nil {
				return err
			}
		}
		if _, err := it.token(sepDelim); err != nil { // the closing '}'
			return err
		}
	}
	start := it.dec.InputOffset()
	_, err := it.dec.Token()
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return malformed(it.ref, it.tr, err, start, sepNone, -1)
	}
	off := start
	if b, ok := it.tr.since(start); ok {
		off += int64(jsonscan.SkipSpace(b, 0))
	}
	return &SyntaxError{Ref: it.ref, Offset: off, Item: -1, Msg: "unexpected data after the end of the JSON document"}
}

func (it *streamIter) close() error { return it.rc.Close() }

// describe names the kind of value a token starts.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", rune(v))
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}
