package shell

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A shell the differential tests run scripts with.
type testShell struct {
	name string
	path string
	bash bool // reads bash syntax ([[ ]], arrays, declare -i, ...)
}

// shells returns the shells found on this machine among bash, dash and
// busybox sh: the tests run every script under each, as /bin/sh is bash on
// RHEL, Fedora and Amazon Linux, dash on Debian and Ubuntu, and busybox in
// the agent's image. A missing shell is skipped with a log line; none at
// all skips the test.
func shells(t *testing.T) []testShell {
	t.Helper()
	var out []testShell
	for _, s := range []testShell{{name: "bash", bash: true}, {name: "dash"}, {name: "busybox"}} {
		p, err := exec.LookPath(s.name)
		if err != nil {
			t.Logf("%s not found: not tested", s.name)
			continue
		}
		s.path = p
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Skip("no bash, dash or busybox")
	}
	return out
}

// bashShell returns bash, or skips.
func bashShell(t *testing.T) testShell {
	t.Helper()
	for _, s := range shells(t) {
		if s.bash {
			return s
		}
	}
	t.Skip("bash not found")
	return testShell{}
}

// command returns the command running script with sh.
func (sh testShell) command(script string) *exec.Cmd {
	if sh.name == "busybox" {
		return exec.Command(sh.path, "sh", "-c", script)
	}
	return exec.Command(sh.path, "-c", script)
}

// run runs script in a fresh directory and returns its stdout, stderr, and
// the names of the files it created there.
func (sh testShell) run(t *testing.T, script string) (stdout, stderr string, created []string) {
	t.Helper()
	dir := t.TempDir()
	cmd := sh.command(script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		created = append(created, filepath.Join(dir, e.Name()))
	}
	return out.String(), errb.String(), created
}
