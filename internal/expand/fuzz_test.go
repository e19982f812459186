package expand

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FuzzStream checks the streaming reader of $.items[*] against
// encoding/json on the whole document: it accepts exactly the valid
// documents whose "items" (present once) is an array, yields that array's
// elements, and puts syntax errors inside the input.
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
		open := func(context.Context, string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}
		spec := &messages.JobSpec{Input: "mem", JSONPath: "$.items[*]", IDField: "\x00none"}
		var got []json.RawMessage
		src, err := Open(context.Background(), spec, open)
		if err == nil {
			for {
				var it Item
				it, err = src.Next()
				if err != nil {
					break
				}
				got = append(got, it.Raw)
			}
			if err == io.EOF {
				err = nil
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
