package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// FuzzValid checks Valid, and Value on a value followed by a space,
// against json.Valid.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e+3,"x\u00e9\n",true,false,null,{}]}`, `[]`, `{}`, `0`, `-0.1`, `01`, `1.`, `12`, `-`, `1e5`,
		`1e`, `"\u12"`, `"\x"`, "\"\x01\"", `[1,]`, `{"a" 1}`, `{"a":1,}`, `[1 2]`, `tru`, `nul`, ` 7 `, `"a`,
		`{"a":{"b":[[[]]]}}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), ` [ 1 , { "a" : 2 } ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data)
		if got := Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid %v", data, got, want)
		}
		d := append(bytes.Clone(data), ' ') // ends any number
		end, st := Value(d, SkipSpace(d, 0))
		if got := st == OK && SkipSpace(d, end) == len(d); got != want {
			t.Fatalf("%q: Value says valid=%v (status %d at %d), json.Valid %v", data, got, st, end, want)
		}
	})
}

// BenchmarkValid checks a work item's payload and a whole work message.
func BenchmarkValid(b *testing.B) {
	for _, doc := range []string{
		`{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"}`,
		`{"job_id":"bench-1","item_id":"item-0000001","index":1,"payload":{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"},"generation":0,"correlation_id":"bench-1:1"}`,
	} {
		data := []byte(doc)
		for _, tt := range []struct {
			name  string
			valid func([]byte) bool
		}{{"jsonscan", Valid}, {"encoding-json", json.Valid}} {
			b.Run(fmt.Sprintf("%s/%dB", tt.name, len(data)), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if !tt.valid(data) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}
