package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A best_effort block without a deadline gets AD-44's 300 s, shown in the
// status, and the job ends with what it has then. Each best-effort
// completion counts in jetfleet_best_effort_completions_total{reason} and
// sets jetfleet_best_effort_completion_ratio.
func TestBestEffortDefaultDeadlineAndMetrics(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	groupPools(t, srv)
	clk := clock.NewManual(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	startCoordinator(t, srv.URL(), testhooks.WithCoordinator(coordinator.Config{Registerer: reg}, testhooks.Coordinator{Clock: clk}))
	startAgent(t, srv.URL(), agent.Config{Name: "a", Pool: "a", Concurrency: 4}, nil)
	startAgent(t, srv.URL(), agent.Config{Name: "b", Pool: "b", Concurrency: 4}, nil)
	cl := client(t, srv) // nobody runs pool c
	const completions, ratio = "jetfleet_best_effort_completions_total", "jetfleet_best_effort_completion_ratio"

	accepted := clk.Now()
	id := submit(t, cl, `{"id": "be-default", "group_by": "${item.region}", "items": `+groupedItems(3)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"min_groups": 3}}`)
	waitDone(t, cl, id, 6)
	st, err := cl.JobStatus(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, st.State, "groups a and b are done, c is not: it waits for the deadline")
	be := st.BestEffort
	require.Equal(t, messages.Duration(5*time.Minute), be.DeadlineAfter)
	require.Empty(t, be.RequestedDeadline)
	require.Empty(t, be.ClampedBy)
	require.NotNil(t, be.Deadline)
	require.True(t, accepted.Add(5*time.Minute).Equal(*be.Deadline), "deadline %s, accepted %s", be.Deadline, accepted)
	require.Zero(t, counter(t, reg, completions))

	clk.Advance(5*time.Minute - time.Second)
	st, err = cl.JobStatus(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, st.State, "4m59s in")
	clk.Advance(time.Second)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.CompletionDeadline, st.CompletionReason)
	require.Equal(t, messages.StateFailed, st.State, "2 of the 3 groups it needs")
	require.EqualValues(t, 3, st.NotRun)
	// The status is final as the map phase ends; the run loop counts the
	// completion just after.
	waitMetric(t, func() bool {
		return counterWith(t, reg, completions, "reason", messages.CompletionDeadline) == 1 && math.Abs(gauge(t, reg, ratio)-2.0/3) < 1e-9
	})

	// Another reason, another count; the ratio is the last completion's.
	id = submit(t, cl, `{"id": "be-min", "group_by": "${item.region}", "items": `+groupedItemsC(2, 0)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"min_groups": 1}}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
	waitMetric(t, func() bool { return counterWith(t, reg, completions, "reason", messages.CompletionMinGroups) == 1 })
	require.Equal(t, 1.0, counterWith(t, reg, completions, "reason", messages.CompletionDeadline))
	require.Equal(t, 2.0, counter(t, reg, completions))
	require.Greater(t, gauge(t, reg, ratio), 0.0)
	require.LessOrEqual(t, gauge(t, reg, ratio), 1.0)
}

// The operator's best-effort settings (BEST_EFFORT_MIN_GROUPS_DEFAULT,
// BEST_EFFORT_DEADLINE_DEFAULT, BEST_EFFORT_DEADLINE_MAX) fill what a job
// leaves unset and cap what it asks; the status records the clamp as the
// budget's does.
func TestBestEffortOperatorSettings(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	groupPools(t, srv)
	clk := clock.NewManual(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	startCoordinator(t, srv.URL(), testhooks.WithCoordinator(coordinator.Config{BestEffort: jobspec.BestEffortSettings{
		MinGroupsDefault: 2, DeadlineDefault: 30 * time.Second, DeadlineMax: time.Minute,
	}}, testhooks.Coordinator{Clock: clk}))
	cl := client(t, srv)
	status := func(id string) *messages.BestEffortStatus {
		var st *messages.JobStatus
		fleettest.WaitFor(t, 10*time.Second, func() (err error) {
			st, err = cl.JobStatus(context.Background(), id) // once the job is accepted
			return err
		})
		require.NotNil(t, st.BestEffort)
		return st.BestEffort
	}
	id := submit(t, cl, `{"id": "be-capped", "group_by": "${item.region}", "items": `+groupedItems(1)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"deadline": "10m", "late_results": "log_only"}}`)
	be := status(id)
	require.Equal(t, messages.Duration(time.Minute), be.DeadlineAfter)
	require.Equal(t, "10m", be.RequestedDeadline)
	require.Equal(t, jobspec.ClampedByDeadlineMax, be.ClampedBy)
	require.Equal(t, 2, be.MinGroups, "the operator's default")
	require.Zero(t, be.RequestedMinGroups)
	require.Equal(t, messages.LateResultsLog, be.LateResults, "AD-44's log_only is log")
	require.True(t, clk.Now().Add(time.Minute).Equal(*be.Deadline))

	id = submit(t, cl, `{"id": "be-defaulted", "group_by": "${item.region}", "items": `+groupedItems(1)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"min_groups": 1}}`)
	be = status(id)
	require.Equal(t, messages.Duration(30*time.Second), be.DeadlineAfter)
	require.Empty(t, be.ClampedBy, "a default is not a clamp")
	require.Equal(t, 1, be.MinGroups)
}

// waitMetric waits until ok holds: metrics the run loop updates just
// after a job's status changes.
func waitMetric(t *testing.T, ok func() bool) {
	t.Helper()
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !ok() {
			return errNotYet
		}
		return nil
	})
}
