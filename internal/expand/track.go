package expand

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// lookBack is how many recently read bytes a trackReader keeps, so a syntax
// error inside a value of up to this size is located exactly.
const lookBack = 1 << 20

// trackReader counts the bytes handed to a json.Decoder and keeps the last
// lookBack..2*lookBack of them.
//
// encoding/json reports the offset of a syntax error found while scanning a
// value (Decode, or Token on a string, number or literal) as a count that
// accumulates across Decode calls, not as a position in the stream. Only
// errors on delimiters carry a true position. To name the exact byte, the
// value is scanned again from its start with a fresh decoder, from the
// bytes kept here.
type trackReader struct {
	r   io.Reader
	n   int64  // bytes read so far
	win []byte // the most recent bytes read; win[0] is at offset n-len(win)
}

func (t *trackReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.n += int64(n)
		t.win = append(t.win, p[:n]...)
		if len(t.win) > 2*lookBack {
			t.win = append(t.win[:0], t.win[len(t.win)-lookBack:]...)
		}
	}
	return n, err
}

// since returns the kept bytes from offset off on, if they are still kept.
func (t *trackReader) since(off int64) ([]byte, bool) {
	start := t.n - int64(len(t.win))
	if off < start || off > t.n {
		return nil, false
	}
	return t.win[off-start:], true
}

// What may precede the value being read when an error occurs.
const (
	// sepNone: the value starts right away (after whitespace).
	sepNone = 0
	// sepAny: an optional ',' or ':' (inside a value being skipped).
	sepAny = 1
	// sepDelim: no value, a closing ']' or '}' is expected; encoding/json
	// reports errors on delimiters at their exact offset.
	sepDelim = 2
	// sepComma: a ',' (array elements after the first).
	sepComma = ','
	// sepKey: a ',' (finish: after the array, a ',' always comes first)
	// or not, then an object key (where a '{' or a number is an error,
	// not the start of a value).
	sepKey = 3
	// sepFirstKey: an object's first key, right after its '{'.
	sepFirstKey = 4
)

// malformed turns an error returned by dec while reading a value that
// starts at byte start (dec.InputOffset() before the call) into a
// *SyntaxError at the exact offending byte where possible. Errors that are
// not about the JSON text (I/O) are returned wrapped with the input ref.
func malformed(ref string, tr *trackReader, err error, start int64, sep byte, item int64) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return &SyntaxError{Ref: ref, Offset: tr.n, Item: item, Msg: "unexpected end of input"}
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Errorf("input %s: reading: %w", ref, err)
	}
	if b, ok := tr.since(start); ok {
		if off, msg, found := locate(b, sep); found {
			return &SyntaxError{Ref: ref, Offset: start + off, Item: item, Msg: msg}
		}
		// Scanning the value again found nothing wrong: the error was on a
		// delimiter, whose offset encoding/json reports exactly.
		return &SyntaxError{Ref: ref, Offset: se.Offset, Item: item, Msg: se.Error()}
	}
	return &SyntaxError{Ref: ref, Offset: start, Item: item, Approx: true, Msg: se.Error()}
}

// locate scans b — a value preceded by whitespace and the separator sep —
// with a fresh decoder and returns the offset in b of the first syntax
// error, if any.
func locate(b []byte, sep byte) (int64, string, bool) {
	if sep == sepDelim {
		return 0, "", false
	}
	i := jsonscan.SkipSpace(b, 0)
	var pre []byte
	switch sep {
	case sepAny:
		if i < len(b) && (b[i] == ',' || b[i] == ':') {
			i = jsonscan.SkipSpace(b, i+1)
		}
	case sepComma:
		if i >= len(b) || b[i] != ',' {
			return 0, "", false
		}
		i = jsonscan.SkipSpace(b, i+1)
	case sepKey, sepFirstKey:
		if sep == sepKey && i < len(b) && b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
		}
		// The key is scanned as an object's first member: with a '{'
		// before it, taken off the offset.
		pre = []byte{'{'}
	}
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(pre), bytes.NewReader(b[i:])))
	var v json.RawMessage
	var se *json.SyntaxError
	if err := dec.Decode(&v); errors.As(err, &se) {
		// A fresh scanner counts the offending byte in Offset.
		return int64(i) + se.Offset - 1 - int64(len(pre)), se.Error(), true
	}
	return 0, "", false
}
