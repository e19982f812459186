package itemrun

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/shell"
)

// The public constants and docs that state internal/shell's values
// (so that go doc names no internal package) agree with them.
func TestShellDefaultsAreShells(t *testing.T) {
	require.Equal(t, shell.DefaultKillGrace, DefaultKillGrace)
	require.Equal(t, []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR"}, shell.DefaultStepEnv,
		"Config.StepEnv's doc lists these")
}
