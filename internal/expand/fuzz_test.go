package expand

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FuzzStream checks the streaming reader of $.items[*] against
// encoding/json on the whole document: it accepts exactly the valid
// documents whose "items" (present once) is an array, yields that array's
// elements, and puts syntax errors inside the input; and it reads the same
// whether the input comes whole or a byte at a time.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		`{"items":[1,"a",{"id":"x"},[null,true]]}`,
		`{"x":{"y":[1,{"z":"]}"}]},"items":[],"after":false}`,
		`{"items":[1,2]} x`, `{"items":[1 2]}`, `{"items":[1,]}`, `{"items":{"a":1}}`,
		`{"items":[1],"items":[2]}`, `{"a\u0062":1,"items":[{"k":"\ud83d\ude00"}]}`,
		`  {"items" : [ 1 , 2 ] }  `, `{"items":[1,2}`, `{"items":[`, ``, `[]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		read := func(reader func() io.Reader) ([]json.RawMessage, error) {
			open := func(context.Context, string) (io.ReadCloser, error) { return io.NopCloser(reader()), nil }
			spec := &messages.JobSpec{Input: "mem", JSONPath: "$.items[*]", IDField: "\x00none"}
			var got []json.RawMessage
			src, err := Open(context.Background(), spec, open)
			if err != nil {
				return nil, err
			}
			for {
				it, err := src.Next()
				if err == io.EOF {
					return got, nil
				}
				if err != nil {
					return got, err
				}
				got = append(got, it.Raw)
			}
		}
		got, err := read(func() io.Reader { return bytes.NewReader(data) })
		// A byte per read: the fast path refills at every byte and, once it
		// has discarded some, hands over by opening the input again. The
		// outcome must not change.
		// (The exact offset and text of a syntax error may differ: the
		// encoding/json reader's location of an error depends on how the
		// input was split into reads, as it did before the fast path.)
		got1, err1 := read(func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) })
		if errKind(err) != errKind(err1) || len(got) != len(got1) {
			t.Fatalf("%q: read whole: %d items, %v; a byte at a time: %d items, %v", data, len(got), err, len(got1), err1)
		}
		for i := range got {
			if !bytes.Equal(got[i], got1[i]) {
				t.Fatalf("%q: items[%d] = %s read whole, %s a byte at a time", data, i, got[i], got1[i])
			}
		}
		var se *SyntaxError
		if errors.As(err, &se) && (se.Offset < 0 || se.Offset > int64(len(data))) {
			t.Fatalf("offset %d outside the input (%d bytes): %v", se.Offset, len(data), err)
		}
		valid := json.Valid(data)
		if err == nil && !valid {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if errors.Is(err, ErrMalformedJSON) && valid {
			t.Fatalf("rejected valid JSON %q: %v", data, err)
		}
		if !valid || errors.Is(err, ErrDuplicateField) {
			return
		}
		var doc struct {
			Items *[]json.RawMessage `json:"items"`
		}
		if json.Unmarshal(data, &doc) != nil || doc.Items == nil {
			if err == nil {
				t.Fatalf("accepted %q, which has no items array", data)
			}
			return
		}
		if err != nil {
			t.Fatalf("rejected %q: %v", data, err)
		}
		if len(got) != len(*doc.Items) {
			t.Fatalf("%q: %d items, want %d", data, len(got), len(*doc.Items))
		}
		for i := range got {
			if !bytes.Equal(got[i], (*doc.Items)[i]) {
				t.Fatalf("%q: items[%d] = %s, want %s", data, i, got[i], (*doc.Items)[i])
			}
		}
	})
}

// errKind is what a reading error is, without its offset and text: the
// error kinds it is, and the item a syntax error is in.
func errKind(err error) string {
	if err == nil {
		return "nil"
	}
	kind := ""
	for _, k := range []error{ErrMalformedJSON, ErrPathNotFound, ErrNotArray, ErrDuplicateField} {
		if errors.Is(err, k) {
			kind += k.Error() + ";"
		}
	}
	var se *SyntaxError
	if errors.As(err, &se) {
		kind += fmt.Sprintf("item %d", se.Item)
	}
	return kind
}
