//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// TestStepLeavesNoProcess: with the agent a child subreaper, a step that
// daemonises a grandchild (setsid and a double fork) leaves nothing behind
// when it ends, whether it succeeds, fails or times out, and no zombie.
func TestStepLeavesNoProcess(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Reaper: agent.ReaperSteps}, nil)
	cl := client(t, srv)
	dir := t.TempDir()

	daemonise := `setsid sh -c 'sleep 1000 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"' sh "$OUT/${item_id}"`
	id := submit(t, cl, fmt.Sprintf(`{"id": "daemons", "env": {"OUT": %q}, "items": [{"id": "ok"}, {"id": "fails"}, {"id": "hangs"}],
		"agent_template": [{"shell": %q, "timeout": "1s", "retry_config": {"attempts": 1}}]}`,
		dir, daemonise+"\ncase ${item_id} in ok) exit 0;; fails) exit 3;; *) sleep 1000;; esac"))
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 2, st.DeadLettered, "%+v", st)
	for _, item := range []string{"ok", "fails", "hangs"} {
		b, err := os.ReadFile(dir + "/" + item)
		require.NoError(t, err, item)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 5*time.Second, 5*time.Millisecond,
			"%s: process %d survived its step, or its zombie was not reaped", item, pid)
	}
}
