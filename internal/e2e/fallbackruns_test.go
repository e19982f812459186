package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// handlerFleet is a server, a coordinator and one agent, for the on_failure
// handler tests; out is where their steps write what ran.
func handlerFleet(t *testing.T) (srv *fleettest.Server, out string) {
	srv = fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 2, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	return srv, t.TempDir()
}

// Prodigy's on_failure with max_attempts fixes, then checks the fix: the
// step fails (no file yet), its handler makes the file, and the step runs
// again in the same delivery and directory, and passes. The item succeeds
// in one delivery: no retry, the step ran twice, the handler once.
func TestProdigyHandlerFixThenRerun(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	srv, out := handlerFleet(t)
	cl := client(t, srv)
	spec, err := jobspec.ToJSON([]byte(`name: fix-then-check
commands:
  - shell: "pwd >> ` + out + `/runs; test -f fixed"
    on_failure:
      shell: "echo fix >> ` + out + `/fixes; touch fixed"
      max_attempts: 3
  - shell: "echo checked"
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 0, st.Retries, "no redelivery: the rerun is in the same delivery")

	runs := lines(t, filepath.Join(out, "runs"))
	require.Len(t, runs, 2, "the step ran twice")
	require.Equal(t, runs[0], runs[1], "both runs in the delivery's one directory")
	require.Equal(t, []string{"fix"}, lines(t, filepath.Join(out, "fixes")), "the handler ran once")

	rs := jobResults(t, srv.JS(), id)
	require.Len(t, rs, 1)
	require.Equal(t, messages.OutcomeSucceeded, rs[0].Outcome)
	require.Equal(t, []messages.StepRun{{Step: 0, Runs: 2, DurationMS: rs[0].Steps[0].DurationMS}, {Step: 1, Runs: 1, DurationMS: rs[0].Steps[1].DurationMS}}, rs[0].Steps)
}

// A handler that never fixes: the step runs max_attempts times, the
// handler after each run, and fail_workflow fails the step after the last;
// the job's error_policy then runs the whole item again (a new delivery,
// a fresh directory), which fails the same way, and the item is dead
// lettered. Its history records each rerun.
func TestProdigyHandlerThatNeverFixes(t *testing.T) {
	t.Parallel()
	srv, out := handlerFleet(t)
	cl := client(t, srv)
	spec, err := jobspec.ToJSON([]byte(`name: never-fixed
error_policy:
  on_item_failure: retry
  retry_config: {max_attempts: 2, backoff: fixed, initial_delay: 20ms}
commands:
  - shell: "pwd >> ` + out + `/runs; test -f fixed"
    on_failure:
      shell: "echo fix >> ` + out + `/fixes"
      max_attempts: 3
      fail_workflow: true
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.EqualValues(t, 1, st.Retries, "one whole-item retry")

	runs := lines(t, filepath.Join(out, "runs"))
	require.Len(t, runs, 6, "three runs in each of the item's two runs")
	require.Equal(t, []string{runs[0], runs[0], runs[0]}, runs[:3])
	require.Equal(t, []string{runs[3], runs[3], runs[3]}, runs[3:])
	require.NotEqual(t, runs[0], runs[3], "the item's retry is a new delivery, in a fresh directory")
	require.Len(t, lines(t, filepath.Join(out, "fixes")), 6, "the handler after each failed run")

	dl := readDLQ(t, srv, id)
	require.Len(t, dl, 1)
	require.Equal(t, messages.ReasonItemRetryExhausted, dl[0].Reason)
	require.Contains(t, dl[0].Error, "fail_workflow")
	var decisions []string
	for _, a := range dl[0].Attempts {
		decisions = append(decisions, a.Decision)
	}
	require.Equal(t, []string{"rerun", "rerun", "item_retry", "rerun", "rerun", "give_up"}, decisions)
}

// handler_failure_fatal: a handler that fails (here killed at its own
// timeout, well before the step's) ends the reruns: the step ran once, and
// the item fails at once with the handler's error.
func TestProdigyHandlerFailureFatal(t *testing.T) {
	t.Parallel()
	srv, out := handlerFleet(t)
	cl := client(t, srv)
	spec, err := jobspec.ToJSON([]byte(`name: fatal
commands:
  - shell: "pwd >> ` + out + `/runs; test -f fixed"
    timeout: 60
    on_failure:
      commands:
        - "echo fix >> ` + out + `/fixes; sleep 30"
      max_attempts: 3
      timeout: 1
      handler_failure_fatal: true
`))
	require.NoError(t, err)
	start := time.Now()
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.Less(t, time.Since(start), 25*time.Second, "the handler's timeout, 1s, bounds it, not the step's 60s")
	require.Len(t, lines(t, filepath.Join(out, "runs")), 1, "no rerun after a fatal handler failure")
	require.Len(t, lines(t, filepath.Join(out, "fixes")), 1, "the handler ran once")
	dl := readDLQ(t, srv, id)
	require.Len(t, dl, 1)
	require.Equal(t, messages.ReasonPermanent, dl[0].Reason)
	require.Contains(t, dl[0].Error, "handler_failure_fatal")
	require.Contains(t, dl[0].Error, "fallback: timeout after 1s")
}
