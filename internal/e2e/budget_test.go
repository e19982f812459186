package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A downstream that is down: every item fails every attempt. The job's
// shared budget caps the retries the whole fleet sends into the outage.
func TestBudgetCapsAFailureStorm(t *testing.T) {
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
