package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTemplateIndexAndVariables(t *testing.T) {
	for src, ref := range map[string][]string{
		"${item.tags[0]}":        {"item", "tags", "0"},
		"${item.a[1][2].b}":      {"item", "a", "1", "2", "b"},
		"${item.tags.0}":         {"item", "tags", "0"},
		"${tests_passed}":        {"tests_passed"},
		"${pkg.version}":         {"pkg", "version"},
		"${build.exit_code}":     {"build", "exit_code"},
		"${shell.output}":        {"shell", "output"},
		"${last.output}":         {"last", "output"},
		"${item_index}":          {"item_index"},
		"${files[2]}":            {"files", "2"},
		"${my-var.list[0].name}": {"my-var", "list", "0", "name"},
	} {
		tm, err := ParseTemplate(src)
		require.NoError(t, err, src)
		require.Equal(t, ref, tm.Parts[0].Ref, src)
	}
	for _, src := range []string{"${item.tags[]}", "${item.tags[x]}", "${item.tags[-1]}", "${item.tags[0}", "${item..a}", "${item.a]}", "${[0]}", "${item.a[0]b}", "${shell.out}", "${9lives}", "${a b}"} {
		_, err := ParseTemplate(src)
		require.Error(t, err, src)
	}
	tm, _ := ParseTemplate("${item.tags[1]}")
	s, err := tm.Render(TemplateVars{Item: []byte(`{"tags":["a","b"]}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, "b", s)
	tm, _ = ParseTemplate("${count}")
	_, err = tm.Render(TemplateVars{}, nil)
	require.ErrorContains(t, err, "not available here")
}

func TestCaptureValue(t *testing.T) {
	for _, c := range []struct {
		format, out string
		success     bool
		want        string
	}{
		{"", "hello\n", true, `"hello"`},
		{"string", "a\nb\n\n", true, `"a\nb"`},
		{"number", " 5\n", true, `5`},
		{"number", "2.5", true, `2.5`},
		{"json", "{ \"version\": \"1.2\" ,\"n\":[1, 2]}\n", true, `{"version":"1.2","n":[1,2]}`},
		{"lines", "a\nb\r\nc\n", true, `["a","b","c"]`},
		{"lines", "", true, `[]`},
		{"boolean", "true\n", false, `true`},
		{"boolean", "false", true, `false`},
		{"boolean", "ok", true, `true`},
		{"boolean", "", false, `false`},
	} {
		got, err := CaptureValue(c.format, c.out, c.success)
		require.NoError(t, err, "%s %q", c.format, c.out)
		require.Equal(t, c.want, string(got), "%s %q", c.format, c.out)
	}
	_, err := CaptureValue("number", "five", true)
	require.ErrorContains(t, err, `the output "five" is not a number`)
	_, err = CaptureValue("json", "{nope", true)
	require.ErrorContains(t, err, "not a JSON document")
	_, err = CaptureValue("yaml", "", true)
	require.ErrorContains(t, err, "unknown capture_format")

	code, ok := 3, false
	c := &Capture{Value: []byte(`{"version":"1.2","tags":["x"]}`), ExitCode: &code, Success: &ok}
	for path, want := range map[string]string{"": `{"version":"1.2","tags":["x"]}`, "version": "1.2", "tags.0": "x", "exit_code": "3", "success": "false"} {
		var p []string
		if path != "" {
			p = splitOrNil(path)
		}
		got, err := c.Lookup(p)
		require.NoError(t, err, path)
		require.Equal(t, want, got, path)
	}
	_, err = c.Lookup([]string{"duration"})
	require.Error(t, err, "a stream not captured is a path into the value, which has no such field")
}

func splitOrNil(s string) []string {
	p, err := splitPath(s)
	if err != nil {
		panic(err)
	}
	return p
}
