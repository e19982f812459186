package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseFlagsInterspersed(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
		json bool
		n    int
	}{
		{"flags first", []string{"--json", "--n", "3", "file.yaml"}, []string{"file.yaml"}, true, 3},
		{"flags after", []string{"file.yaml", "--json", "--n", "3"}, []string{"file.yaml"}, true, 3},
		{"equals form", []string{"file.yaml", "--n=4"}, []string{"file.yaml"}, false, 4},
		{"double dash", []string{"--", "--json"}, []string{"--json"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &cliEnv{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
			fs := newFlagSet(env, "x", "x")
			asJSON := fs.Bool("json", false, "")
			n := fs.Int("n", 0, "")
			code, ok := parseFlags(fs, tc.args)
			require.True(t, ok, "code %d", code)
			require.Equal(t, tc.want, fs.Args())
			require.Equal(t, tc.json, *asJSON)
			require.Equal(t, tc.n, *n)
		})
	}
}

func TestUnknownCommandIsBadInput(t *testing.T) {
	var out, errb bytes.Buffer
	code := runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, []string{"frobnicate"})
	require.Equal(t, exitUsage, code)
	require.Contains(t, errb.String(), `unknown command "frobnicate"`)
}
