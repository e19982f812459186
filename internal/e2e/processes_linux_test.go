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

// With the agent a child subreaper, an item's directory its steps leave
// empty serves a later item (.spare.r*, itemdir.go), and every item still
// starts in an empty, private directory of its own: two slots, 40 items
// that each find their directory empty and 0700, write in it, and empty
// it again; some loosen its mode, so theirs is removed, not reused.
func TestReusedItemDirectoriesAreFresh(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	work := t.TempDir()
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Reaper: agent.ReaperSteps, Concurrency: 2, WorkDir: work}, nil)
	cl := client(t, srv)
	var items []string
	for i := range 40 {
		items = append(items, fmt.Sprintf(`{"id": "i%d"}`, i))
	}
	id := submit(t, cl, `{"id": "reuse", "items": [`+strings.Join(items, ",")+`],
		"agent_template": [
			{"shell": "test -z \"$(ls -A)\" && test \"$(stat -c %a .)\" = 700 && echo ${item_id} > mine", "retry_config": {"attempts": 1}},
			{"shell": "test \"$(cat mine)\" = ${item_id} && rm mine && case ${item_id} in i1?) chmod 755 .;; esac"}
		]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 40, st.Succeeded, "%+v", st)
	// The job may be seen done a moment before its last directory goes.
	reused := 0
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(work + "/jetfleet-items")
		require.NoError(t, err)
		reused = 0
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".spare.") {
				return false
			}
			if strings.HasPrefix(e.Name(), ".spare.r") {
				reused++
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "only spares are left")
	require.NotZero(t, reused, "the last items' directories wait as spares")
}
