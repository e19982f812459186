package writefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckPath(t *testing.T) {
	for _, ok := range []string{"a.json", "out/a.json", "a/../b", "./x", "a..b"} {
		require.NoError(t, CheckPath(ok), ok)
	}
	for p, want := range map[string]string{
		"":          "must not be empty",
		"/etc/x":    "is absolute",
		"..":        "leads out",
		"../x":      "leads out",
		"a/../../x": "leads out",
		`..\x`:      "leads out",
		".":         "names the item's directory",
		"a\x00b":    "NUL",
	} {
		require.ErrorContains(t, CheckPath(p), want, p)
	}
}

func TestParseMode(t *testing.T) {
	m, err := ParseMode("")
	require.NoError(t, err)
	require.Equal(t, DefaultMode, m)
	m, err = ParseMode("0600")
	require.NoError(t, err)
	require.EqualValues(t, 0o600, m)
	m, err = ParseMode("755")
	require.NoError(t, err)
	require.EqualValues(t, 0o755, m)
	for _, bad := range []string{"0999", "rw-r--r--", "4755", "-1"} {
		_, err := ParseMode(bad)
		require.Error(t, err, bad)
	}
}

func TestRender(t *testing.T) {
	b, err := Render(FormatJSON, `{"a":[1,2]}`)
	require.NoError(t, err)
	require.Equal(t, "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n", string(b))
	_, err = Render(FormatJSON, `{"a":`)
	require.ErrorContains(t, err, "content is not valid JSON (format: json)")
	b, err = Render(FormatYAML, "a:   1\nb: [x, y]\n")
	require.NoError(t, err)
	require.Equal(t, "a: 1\nb: [x, y]\n", string(b))
	_, err = Render(FormatYAML, "a: [b\n")
	require.ErrorContains(t, err, "content is not valid YAML (format: yaml)")
	b, err = Render("", "as is {")
	require.NoError(t, err)
	require.Equal(t, "as is {", string(b))
	_, err = Render(FormatText, strings.Repeat("x", MaxBytes+1))
	require.ErrorContains(t, err, "over write_file's bound of 1048576")
	_, err = Render("xml", "")
	require.ErrorContains(t, err, `unknown format "xml"`)
}

// Write stays in its directory: create_dirs makes the parents, an
// existing file takes the mode, and a symbolic link an earlier step left
// cannot lead it out.
func TestWrite(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	require.ErrorContains(t, Write(dir, "a/b.txt", []byte("x"), 0o644, false), "create_dirs: true makes its directories")
	require.NoError(t, Write(dir, "a/b.txt", []byte("x"), 0o600, true))
	fi, err := os.Stat(filepath.Join(dir, "a", "b.txt"))
	require.NoError(t, err)
	require.EqualValues(t, 0o600, fi.Mode().Perm())
	require.NoError(t, Write(dir, "a/b.txt", []byte("yz"), 0o640, false))
	got, err := os.ReadFile(filepath.Join(dir, "a", "b.txt"))
	require.NoError(t, err)
	require.Equal(t, "yz", string(got))
	fi, err = os.Stat(filepath.Join(dir, "a", "b.txt"))
	require.NoError(t, err)
	require.EqualValues(t, 0o640, fi.Mode().Perm())

	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link")))
	require.Error(t, Write(dir, "link/x.txt", []byte("x"), 0o644, true))
	require.NoError(t, os.Symlink(filepath.Join(outside, "f"), filepath.Join(dir, "f")))
	require.Error(t, Write(dir, "f", []byte("x"), 0o644, false))
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing written outside")
	require.ErrorContains(t, Write(dir, "../x", nil, 0o644, false), "leads out")
}
