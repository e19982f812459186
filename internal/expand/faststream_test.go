package expand

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// countingOpener serves content and counts the opens.
type countingOpener struct {
	content []string // the content of each open; the last repeats
	opens   int
}

func (o *countingOpener) open(context.Context, string) (io.ReadCloser, error) {
	c := o.content[min(o.opens, len(o.content)-1)]
	o.opens++
	return io.NopCloser(strings.NewReader(c)), nil
}

// streamAll reads the items of path in o's content: their raw JSON.
func streamAll(t *testing.T, path string, o *countingOpener) ([]string, error) {
	t.Helper()
	items, err := expand(t, &messages.JobSpec{Input: "mem", JSONPath: path}, o.open)
	var out []string
	for _, it := range items {
		out = append(out, it.Raw)
	}
	return out, err
}

func TestFastStreamHandsOver(t *testing.T) {
	items := func(n int, pad int) (string, []string) {
		var b strings.Builder
		var want []string
		for i := range n {
			v := fmt.Sprintf(`{"id":"i%d","pad":"%s"}`, i, strings.Repeat("p", pad))
			want = append(want, v)
			if i > 0 {
				b.WriteString(",\n")
			}
			b.WriteString(v)
		}
		return b.String(), want
	}
	list, want := items(2000, 100) // 250 KB: past the first read
	bigSkip := `"skip":"` + strings.Repeat("s", 2*fastSkipLimit) + `"`
	tests := []struct {
		name, doc, path string
		opens           int // how many times the input is opened
	}{
		{"plain", `{"items":[` + list + `]}`, "$.items[*]", 1},
		{"top-level", " [" + list + "]\n", "$[*]", 1},
		{"nested", `{"a":{"x":[{}],"b":[` + list + `],"y":{"items":[1]}}}`, "$.a.b[*]", 1},
		{"escaped key before the array", `{"it\u0065ms":[` + list + `]}`, "$.items[*]", 1},
		{"escaped key after the array", `{"items":[` + list + `],"n\u0061me":1}`, "$.items[*]", 2},
		{"large skipped value before", `{` + bigSkip + `,"items":[` + list + `]}`, "$.items[*]", 1},
		{"large skipped value after", `{"items":[` + list + `],` + bigSkip + `}`, "$.items[*]", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &countingOpener{content: []string{tt.doc}}
			got, err := streamAll(t, tt.path, o)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, tt.opens, o.opens)
		})
	}

	t.Run("element larger than the buffer", func(t *testing.T) {
		list, want := items(3, 3*fastReadSize)
		o := &countingOpener{content: []string{"[" + list + "]"}}
		got, err := streamAll(t, "", o)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, 1, o.opens)
	})

	t.Run("input changed before the hand-over", func(t *testing.T) {
		// The first read fails late (after discarding); the second open
		// holds fewer items than were yielded.
		o := &countingOpener{content: []string{`{"items":[` + list + `,x]}`, `{"items":[1]}`}}
		got, err := streamAll(t, "$.items[*]", o)
		require.ErrorContains(t, err, "input mem: the input changed while it was read")
		require.Equal(t, want, got)
		require.Equal(t, 2, o.opens)
	})
}

// BenchmarkStream reads 100,000 items of the bench's shape through the
// fast path and through encoding/json's (streamIter).
func BenchmarkStream(b *testing.B) {
	data := benchDoc(100_000)
	q, err := parseQuery("$.items[*]")
	require.NoError(b, err)
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	for _, tt := range []struct {
		name string
		iter func() (iterator, error)
	}{
		{"fast", func() (iterator, error) { rc, _ := open(); return newFastStream("mem", q, rc, open) }},
		{"encoding-json", func() (iterator, error) { rc, _ := open(); return newStreamIter("mem", q, rc) }},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				it, err := tt.iter()
				require.NoError(b, err)
				n := 0
				for {
					if _, err := it.next(); err != nil {
						require.ErrorIs(b, err, io.EOF)
						break
					}
					n++
				}
				require.Equal(b, 100_000, n)
			}
		})
	}
}

// BenchmarkCount counts 100,000 items of the bench's shape from memory.
func BenchmarkCount(b *testing.B) {
	data := benchDoc(100_000)
	open := func(context.Context, string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	spec := &messages.JobSpec{Input: "mem", JSONPath: "$.items[*]"}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		n, _, err := Count(context.Background(), spec, open)
		require.NoError(b, err)
		require.Equal(b, int64(100_000), n)
	}
}

// benchDoc is an input of n items shaped like scripts/genitems's.
func benchDoc(n int) []byte {
	var doc bytes.Buffer
	doc.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			doc.WriteString(",\n")
		}
		fmt.Fprintf(&doc, `{"id":"item-%07d","path":"images/item-%07d.jpg","region":"eu"}`, i, i)
	}
	doc.WriteString("]}")
	return doc.Bytes()
}
