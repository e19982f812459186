package shell

import (
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTailWriter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{name: "nothing", max: 4, want: ""},
		{name: "under the limit", max: 8, writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "exactly the limit", max: 4, writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "wraps", max: 4, writes: []string{"abc", "def"}, want: "cdef"},
		{name: "one big write", max: 4, writes: []string{"abcdefgh"}, want: "efgh"},
		{name: "big write after small", max: 4, writes: []string{"xy", "abcdefgh", "i"}, want: "fghi"},
		{name: "exact fill then more", max: 3, writes: []string{"abc", "d"}, want: "bcd"},
		{name: "cut UTF-8 sequence dropped", max: 5, writes: []string{"xx", "日本"}, want: "本"},
		{name: "empty writes", max: 3, writes: []string{"", "ab", "", "cd", ""}, want: "bcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newTailWriter(tt.max)
			var total int
			for _, s := range tt.writes {
				n, err := w.Write([]byte(s))
				require.NoError(t, err)
				require.Equal(t, len(s), n)
				total += len(s)
			}
			require.Equal(t, tt.want, w.String())
			require.Equal(t, int64(total), w.Total())
		})
	}
}

// TestTailWriterRandom compares the ring with the tail of everything
// written, over random write sizes, and checks its memory stays fixed.
func TestTailWriterRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 7, 64, 1000} {
		w := newTailWriter(max)
		var all strings.Builder
		for range 500 {
			b := make([]byte, rng.IntN(3*max))
			for i := range b {
				b[i] = 'a' + byte(rng.IntN(26))
			}
			_, _ = w.Write(b)
			all.Write(b)
			want := all.String()
			if len(want) > max {
				want = want[len(want)-max:]
			}
			require.Equal(t, want, w.String())
			require.LessOrEqual(t, cap(w.buf), max)
		}
	}
}

// ReadFrom, which io.Copy uses (os/exec copies output pipes with it),
// keeps and counts what Write would, and passes a read error on.
func TestTailWriterReadFrom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 5, 8 << 10, 100 << 10} {
		b := make([]byte, size)
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		w := newTailWriter(1000)
		n, err := io.Copy(w, struct{ io.Reader }{strings.NewReader(string(b))}) // no WriterTo: ReadFrom is used
		require.NoError(t, err)
		require.Equal(t, int64(size), n)
		require.Equal(t, int64(size), w.Total())
		require.Equal(t, string(b[max(0, size-1000):]), w.String())
	}
	boom := errors.New("boom")
	w := newTailWriter(10)
	n, err := w.ReadFrom(io.MultiReader(strings.NewReader("abc"), errReader{boom}))
	require.ErrorIs(t, err, boom)
	require.Equal(t, int64(3), n)
	require.Equal(t, "abc", w.String())
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
