package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A downstream that is down: every item fails every attempt. The job's
// shared budget caps the retries the whole fleet sends into the outage.
func TestBudgetCapsAFailureStorm(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	for i := range 3 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 16}, nil)
	}
	cl := client(t, srv)
	const n = 200
	id := submit(t, cl, fmt.Sprintf(`{"id": "storm", "items": %s,
		"agent_template": [{"handler": "flaky", "with": {"fail_rate": 1.0, "message": "503 Service Unavailable"},
			"retry_config": {"attempts": 5, "backoff": "fixed", "initial_delay": "10ms"}}],
		"retry_budget": 20, "retry_budget_per_item": 3}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i} })))
	st := waitJob(t, cl, id, 90*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, n, st.DeadLettered, "every item gave up and was dead-lettered")
	require.EqualValues(t, 20, st.Retries, "exactly the budget was spent, across all agents")
	require.Equal(t, 20, st.Budget.Total)
	require.Equal(t, 20, st.Budget.Consumed)
	require.True(t, st.Budget.Exhausted)
	require.Equal(t, 3, st.Budget.PerItemMax)
	// Every item was denied by one budget or the other, none ran out of attempts.
	require.EqualValues(t, n, st.Budget.DeniedJob+st.Budget.DeniedItem, "%+v", st.Budget)
	require.Positive(t, st.Budget.DeniedJob)
}

// A long-lived agent forgets an ended job: the job's remaining-budget
// gauge goes (STYLE: job ids only on gauges removed when the job ends),
// and a replay afterwards still finds its budget.
func TestAgentForgetsAnEndedJob(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	reg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Registerer: reg}, nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "forgotten", "items": [{"id": "x"}], "retry_budget": 5,
		"agent_template": [{"shell": "echo down >&2; exit 1", "retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "10ms"}}]}`)
	series := func() int {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		n := 0
		for _, mf := range mfs {
			if mf.GetName() != "jetfleet_retry_budget_remaining" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "job_id" && lp.GetValue() == id {
						n++
					}
				}
			}
		}
		return n
	}
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)
	require.EqualValues(t, 1, st.Budget.Consumed)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if series() != 0 {
			return errNotYet
		}
		return nil
	})

	// Reopened by a replay: the agent reads the job and its budget again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, ResetAttempts: true, Wait: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, rs.Replayed)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		st, err := cl.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.DeadLettered != 1 || st.Budget.Consumed != 2 || st.State == messages.StateRunning {
			return errNotYet
		}
		return nil
	})
}
