package secret

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMasker(t *testing.T) {
	m := NewMasker("abc123", "", "abc123456", "tok\n")
	for _, tc := range []struct{ name, in, want string }{
		{"none", "nothing here", "nothing here"},
		{"one", "key=abc123.", "key=***."},
		{"longest first", "abc123456 abc123", "*** ***"},
		{"trimmed value", "t=tok!", "t=***!"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, m.Mask(tc.in)) })
	}
	require.Equal(t, "***, end", m.MaskTail("23456, end", true), "a value cut by the tail")
	require.Equal(t, "23456, end", m.MaskTail("23456, end", false))
	require.Nil(t, NewMasker("", ""))
	var none *Masker
	require.Equal(t, "x", none.Mask("x"))
}

func TestSourceReadFile(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "k"), []byte("v\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(other, "outside"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(other, "outside"), filepath.Join(dir, "link")))
	s := Source{Dirs: []string{dir}}
	data, err := s.ReadFile("k")
	require.NoError(t, err)
	require.Equal(t, "v\n", string(data))
	_, err = s.ReadFile(filepath.Join(dir, "k"))
	require.NoError(t, err)
	_, err = s.ReadFile("missing")
	require.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	_, err = s.ReadFile(filepath.Join(other, "outside"))
	require.ErrorIs(t, err, ErrNotAllowed)
	_, err = s.ReadFile("link")
	require.Error(t, err, "a link does not lead out")
	_, err = s.ReadFile("../" + filepath.Base(other) + "/outside")
	require.Error(t, err)
	_, err = Source{}.ReadFile("k")
	require.ErrorIs(t, err, ErrNotAllowed)
	_, err = Source{Env: map[string]string{"A": "1"}}.Lookup("B")
	require.ErrorIs(t, err, ErrNotFound)
}
