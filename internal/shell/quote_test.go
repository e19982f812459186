package shell

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "empty", in: "", want: "''"},
		{name: "plain", in: "abc", want: "'abc'"},
		{name: "single quote", in: "it's", want: `'it'\''s'`},
		{name: "only a quote", in: "'", want: `''\'''`},
		{name: "injection", in: "'; rm -rf / #", want: `''\''; rm -rf / #'`},
		{name: "dollar and backquote", in: "$(id) `id` $HOME", want: "'$(id) `id` $HOME'"},
		{name: "newline", in: "a\nb", want: "'a\nb'"},
		{name: "backslash", in: `a\b`, want: `'a\b'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Quote(tt.in))
		})
	}
}

// TestQuoteShell checks with the real shell that Quote(s) is one word
// whose value is s.
func TestQuoteShell(t *testing.T) {
	t.Parallel()
	var script strings.Builder
	var want strings.Builder
	for _, p := range payloads {
		script.WriteString("set -- " + Quote(p) + "; printf '%d[%s]' $# \"$1\"\n")
		want.WriteString("1[" + p + "]")
	}
	out, err := exec.Command(shellPath, "-c", script.String()).Output()
	require.NoError(t, err)
	require.Equal(t, want.String(), string(out))
}

// unquote reads one POSIX shell word made of single-quoted strings and
// backslash-escaped characters, as Quote writes them. ok is false for
// anything else (an unquoted special character, an unterminated quote).
func unquote(w string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(w); {
		switch w[i] {
		case '\'':
			j := strings.IndexByte(w[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(w[i+1 : i+1+j])
			i += j + 2
		case '\\':
			if i+1 >= len(w) || w[i+1] == '\n' {
				return "", false
			}
			b.WriteByte(w[i+1])
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

func FuzzQuote(f *testing.F) {
	for _, p := range payloads {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := unquote(Quote(s))
		require.True(t, ok, "Quote(%q) = %q is not one quoted word", s, Quote(s))
		require.Equal(t, s, got)
	})
}
