package specenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/secret"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestParseEnvFile(t *testing.T) {
	got, err := ParseEnvFile([]byte("# c\n\nA=1\n B = 'two words' \nexport C=\"x=y\"\nEMPTY=\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"A": "1", "B": "two words", "C": "x=y", "EMPTY": ""}, got)
	for _, tc := range []struct{ in, want string }{
		{"A=1\nNOEQUALS\n", "line 2: expected NAME=value"},
		{"1A=x\n", `line 1: "1A" is not a variable name`},
		{"K=\"open\n", "line 1: K's value opens a quote it does not close"},
	} {
		_, err := ParseEnvFile([]byte(tc.in))
		require.ErrorIs(t, err, ErrEnvFile)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestSensitive(t *testing.T) {
	for _, n := range []string{"PASSWORD", "api_key", "API-KEY", "AUTH_TOKEN", "GITHUB_TOKEN", "DB_SECRET", "SSH_KEY"} {
		require.True(t, Sensitive(n), n)
	}
	for _, n := range []string{"USERNAME", "NORMAL_VAR", "PATH"} {
		require.False(t, Sensitive(n), n)
	}
}

// The environment of an item on an agent: env files, env, commands (cached
// or not), conditions over them, secrets, and what is masked.
func TestEnvItem(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.env"), []byte("REGION=eu\nSTAGE=from-file\nAPI_TOKEN=filetok\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key"), []byte("  filesecret \n"), 0o600))
	spec := &messages.JobSpec{
		Env:      map[string]string{"STAGE": "stable"},
		EnvFiles: []string{"a.env", "gone.env"},
		EnvValues: map[string]messages.EnvValue{
			"CORES":   {Command: "nproc", Cache: true},
			"NOW":     {Command: "date"},
			"CHANNEL": {Condition: "${STAGE} == 'stable' && CORES == '8'", WhenTrue: "release", WhenFalse: "preview"},
		},
		Secrets: map[string]messages.Secret{"TOK": {Provider: "env", Key: "CI_TOK"}, "KEY": {Provider: "file", Key: "key"}},
	}
	runs := map[string]int{}
	run := func(_ context.Context, cmd string, env []string) (string, error) {
		runs[cmd]++
		require.Contains(t, env, "STAGE=stable", "a command sees env")
		return map[string]string{"nproc": "8\n", "date": "today"}[cmd], nil
	}
	var skipped []string
	e := NewEnv(spec, secret.Source{Env: map[string]string{"CI_TOK": "envtok"}, Dirs: []string{dir}}, run, func(p string) { skipped = append(skipped, p) })
	for range 2 {
		r, err := e.Item(context.Background())
		require.NoError(t, err)
		require.Equal(t, []string{"API_TOKEN=filetok", "REGION=eu", "STAGE=from-file", "STAGE=stable", "CORES=8", "NOW=today", "CHANNEL=release"}, r.Env)
		require.Equal(t, []string{"KEY=filesecret", "TOK=envtok"}, r.Secrets)
		require.ElementsMatch(t, []string{"filetok", "filesecret", "envtok"}, r.Mask)
	}
	require.Equal(t, map[string]int{"nproc": 1, "date": 2}, runs, "cache: once; without: each item")
	require.Equal(t, []string{"gone.env"}, skipped, "a missing env file is skipped, once")

	missing := NewEnv(&messages.JobSpec{Secrets: map[string]messages.Secret{"TOK": {Provider: "env", Key: "NOPE"}}}, secret.Source{}, run, nil)
	_, err := missing.Item(context.Background())
	require.ErrorIs(t, err, ErrResolve)
	require.ErrorIs(t, err, secret.ErrNotFound)
	require.ErrorContains(t, err, "secrets.TOK")

	failing := NewEnv(&messages.JobSpec{EnvValues: map[string]messages.EnvValue{"X": {Command: "false"}}}, secret.Source{}, func(context.Context, string, []string) (string, error) {
		return "", errors.New("exit status 1")
	}, nil)
	_, err = failing.Item(context.Background())
	require.ErrorContains(t, err, `env.X: the command "false": exit status 1`)
}

func TestRewriteKeepsOtherDocuments(t *testing.T) {
	r := Rewrite([]any{map[string]any{"shell": "x"}}, "")
	require.Empty(t, r.Problems)
	r = Rewrite(map[string]any{"env": map[string]any{"A": "1"}}, "")
	require.Empty(t, r.Problems)
	require.True(t, strings.HasPrefix(r.Notes[0].Message, "comes from the job's env"))
}
