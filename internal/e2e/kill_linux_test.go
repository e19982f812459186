//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// TestCancelKillStopsShellSteps: cancel --kill of a job whose 8 items run
// sleep 600 on two agents (a grandchild of the step's shell, half of them
// ignoring SIGTERM so that only the SIGKILL after the grace ends them):
// the job is cancelled at once, no process of it is left within 10 s, and
// its counts stay exact: 8 not_run, nothing failed, retried or
// dead-lettered, no late result.
func TestCancelKillStopsShellSteps(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for i, reg := range regs {
		// ReaperOff: only the process-group kill ends the grandchildren.
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i+1), Concurrency: 4, KillGrace: time.Second,
			Reaper: agent.ReaperOff, Registerer: reg}, nil)
	}
	cl := client(t, srv)
	marker := fmt.Sprintf("jetfleet-kill-%d-%d", os.Getpid(), time.Now().UnixNano())
	script := `case ${item_id} in k0|k2|k4|k6) trap '' TERM;; esac; sh -c 'sleep 600'; echo finished`
	id := submit(t, cl, fmt.Sprintf(`{"id": "kill-shell", "env": {"KILL_MARKER": %q}, "items": %s,
		"agent_template": [{"shell": %q, "retry_config": {"attempts": 3}}]}`,
		marker, itemsJSON(8, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("k%d", i)} }), script))

	fleettest.WaitFor(t, 60*time.Second, func() error {
		if n := len(markedSleeps(marker)); n < 8 {
			return fmt.Errorf("%d of 8 sleeps running", n)
		}
		return nil
	})
	before := markedSleeps(marker)

	start := time.Now()
	st, err := cl.JobCancel(context.Background(), id, jfclient.WithKill())
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State)
	// A process in the middle of exiting has already dropped its
	// environment (so it no longer looks marked) but is not a zombie yet:
	// the sleeps seen before are waited for by pid as well.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if left := markedProcesses(marker); len(left) > 0 {
			return fmt.Errorf("processes of the job still running: %v", left)
		}
		for _, pid := range before {
			if alive(pid) {
				return fmt.Errorf("sleep %d still running", pid)
			}
		}
		return nil
	})
	t.Logf("all %d sleeps (and their shells) gone %s after cancel --kill (kill grace 1s)", len(before), time.Since(start).Round(time.Millisecond))

	// Each agent dropped what it ran, without a result.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if n := sumCounterWith(t, regs, "jetfleet_agent_items_total", "outcome", "killed"); n != 8 {
			return fmt.Errorf("%v of 8 items killed", n)
		}
		return nil
	})
	for i, reg := range regs {
		require.EqualValues(t, 4, counterWith(t, reg, "jetfleet_agent_items_total", "outcome", "killed"), "agent a%d ran 4 items", i+1)
	}
	st = waitJob(t, cl, id, 10*time.Second)
	require.Equal(t, messages.StateCancelled, st.State)
	require.EqualValues(t, 8, st.NotRun, "%+v", st)
	require.Zero(t, st.Succeeded+st.Failed+st.DeadLettered+st.Skipped, "%+v", st)
	require.Zero(t, st.Retries, "%+v", st)
	require.Zero(t, st.LateResults, "%+v", st)
	require.Zero(t, dlqState(t, srv).Msgs, "nothing dead-lettered")
	require.Zero(t, sumCounterWith(t, regs, "jetfleet_agent_retries_total", "", ""), "nothing retried")
}

// TestCancelKillCancelsHandlerContext: a handler's context ends with
// agent.ErrJobKilled on cancel --kill, also for a job cancelled without
// kill before; a cancel without kill lets running handlers finish, and
// their late results amend the counts.
func TestCancelKillCancelsHandlerContext(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	reg := prometheus.NewRegistry()
	type ended struct {
		job   string
		cause error
	}
	started := make(chan string, 16)
	endedC := make(chan ended, 16)
	release := make(chan struct{})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 8, Registerer: reg}, testhooks.Agent{Provision: calmProvision}), map[string]agent.HandlerFunc{
		"block": func(ctx context.Context, c *agent.Call) (any, error) {
			started <- c.JobID
			select {
			case <-ctx.Done():
				endedC <- ended{c.JobID, context.Cause(ctx)}
				return nil, ctx.Err()
			case <-release:
				endedC <- ended{c.JobID, ctx.Err()}
				return "ok", nil
			}
		},
	})
	cl := client(t, srv)
	spec := func(id string) string {
		return `{"id": "` + id + `", "items": [{"id": "x"}, {"id": "y"}], "agent_template": [{"handler": "block"}]}`
	}
	waitStarted := func(job string, n int) {
		t.Helper()
		for range n {
			select {
			case j := <-started:
				require.Equal(t, job, j)
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: handlers did not start", job)
			}
		}
	}
	waitEnded := func(job string, n int) []error {
		t.Helper()
		var causes []error
		for range n {
			select {
			case e := <-endedC:
				require.Equal(t, job, e.job)
				causes = append(causes, e.cause)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: handlers still running 10s after the kill", job)
			}
		}
		return causes
	}

	// cancel --kill: both handlers see their context end, with ErrJobKilled.
	id := submit(t, cl, spec("kill-now"))
	waitStarted(id, 2)
	st, err := cl.JobCancel(context.Background(), id, jfclient.WithKill())
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State)
	for _, cause := range waitEnded(id, 2) {
		require.ErrorIs(t, cause, agent.ErrJobKilled)
	}
	requireKilled(t, reg, 2)
	st = waitJob(t, cl, id, 10*time.Second)
	require.EqualValues(t, 2, st.NotRun, "%+v", st)
	require.Zero(t, st.Failed+st.DeadLettered+st.Succeeded+st.LateResults, "%+v", st)

	// A plain cancel lets them run on; a kill afterwards ends them.
	id = submit(t, cl, spec("kill-later"))
	waitStarted(id, 2)
	_, err = cl.JobCancel(context.Background(), id)
	require.NoError(t, err)
	st, err = cl.JobCancel(context.Background(), id, jfclient.WithKill())
	require.NoError(t, err, "a kill of a job cancelled without one is not a conflict")
	require.Equal(t, messages.StateCancelled, st.State)
	for _, cause := range waitEnded(id, 2) {
		require.ErrorIs(t, cause, agent.ErrJobKilled)
	}
	requireKilled(t, reg, 4)

	// A plain cancel: the running handlers keep their context and finish;
	// their results come late and amend the counts.
	id = submit(t, cl, spec("no-kill"))
	waitStarted(id, 2)
	st, err = cl.JobCancel(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State)
	require.EqualValues(t, 2, st.NotRun, "counted not_run when cancelled: %+v", st)
	close(release)
	for _, cause := range waitEnded(id, 2) {
		require.NoError(t, cause, "a cancel without kill leaves the handler's context alone")
	}
	fleettest.WaitFor(t, 10*time.Second, func() error {
		st, err := cl.JobStatus(context.Background(), id)
		if err != nil {
			return err
		}
		if st.Succeeded != 2 {
			return fmt.Errorf("succeeded %d of 2: %+v", st.Succeeded, st)
		}
		return nil
	})
	st = waitJob(t, cl, id, 10*time.Second)
	require.Equal(t, messages.StateCancelled, st.State)
	require.EqualValues(t, 2, st.LateResults)
	require.Zero(t, st.NotRun)
	requireKilled(t, reg, 4)

	_, err = cl.JobCancel(context.Background(), "kill-now")
	require.ErrorContains(t, err, "already ended", "a plain cancel of an ended job is still a conflict")
}

func requireKilled(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if got := counterWith(t, reg, "jetfleet_agent_items_total", "outcome", "killed"); got != n {
			return fmt.Errorf("%v items killed, want %v", got, n)
		}
		return nil
	})
}

func sumCounterWith(t *testing.T, regs []*prometheus.Registry, name, label, value string) float64 {
	var sum float64
	for _, reg := range regs {
		sum += counterWith(t, reg, name, label, value)
	}
	return sum
}

// markedProcesses are the live (not zombie) processes whose environment
// holds KILL_MARKER=marker: a step's shells and what they started.
func markedProcesses(marker string) []int {
	return scanProc(marker, func([]byte) bool { return true })
}

// markedSleeps are the marked processes running sleep.
func markedSleeps(marker string) []int {
	return scanProc(marker, func(comm []byte) bool { return string(bytes.TrimSpace(comm)) == "sleep" })
}

func scanProc(marker string, match func(comm []byte) bool) []int {
	ents, _ := os.ReadDir("/proc")
	want := []byte("KILL_MARKER=" + marker + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !bytes.Contains(env, want) || !alive(pid) {
			continue
		}
		if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil && match(comm) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}
