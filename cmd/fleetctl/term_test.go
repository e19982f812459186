package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// /dev/null is a character device but not a terminal: output sent there
// (cron, a CI log) gets no progress bar redrawn in place, nor colours.
func TestDevNullIsNotATerminal(t *testing.T) {
	t.Parallel()
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f))
	require.False(t, isTerminal(&bytes.Buffer{}))
	p, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer p.Close()
	require.False(t, isTerminal(p))
}
