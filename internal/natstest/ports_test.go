package natstest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Ports come from below the ephemeral range, where no outgoing connection
// takes a stopped server's port before its restart, and never twice.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	if ports.hi == 0 {
		t.Skip("the ephemeral range leaves too few ports below it: the kernel chooses")
	}
	seen := map[int]bool{}
	for range 50 {
		ps, err := freePorts(3)
		require.NoError(t, err)
		for _, p := range ps {
			require.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
			require.GreaterOrEqual(t, p, ports.lo)
			require.Less(t, p, ports.hi, "below the ephemeral range")
		}
	}
}
