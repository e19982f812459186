package itemrun

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A worker that hands its slot over to do a failure's bookkeeping waits,
// once done, for the next slot handed over instead of ending: an agent
// whose items all fail once starts a bounded number of worker goroutines,
// not one per failure, and none outlives the agent.
func TestBookkeepingWorkersAreReused(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	ctx := testCtx(t, 60*time.Second)
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{})

	const conc, items = 4, 400
	a := New(srv.Connect(t), Config{Name: "spare", Concurrency: conc, ShutdownTimeout: 5 * time.Second}).HandleBuiltins()
	defer runAgent(t, ctx, a)()

	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	list := make([]map[string]any, items)
	for i := range list {
		list[i] = map[string]any{"id": fmt.Sprint("i", i)}
	}
	spec, err := json.Marshal(map[string]any{"id": "spares", "items": list, "retry_budget": "100%",
		"agent_template": []map[string]any{{"handler": "flaky", "with": map[string]any{"fail_attempts": 1},
			"retry_config": map[string]any{"attempts": 2, "backoff": "fixed", "initial_delay": "1ms"}}}})
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, spec)
	require.NoError(t, err)
	st, err := cl.JobWait(ctx, "spares", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, items, st.Retries, "every item failed once")
	// A worker per slot, one per bookkeeping under way at once (at most
	// (bookkeepingWorkers-1) per slot), and a few more for the moments in
	// which a worker done with its bookkeeping is not yet waiting as a
	// spare; one per failure (~conc+items) without the spares.
	require.LessOrEqual(t, a.workerStarts.Load(), int64(2*conc*bookkeepingWorkers))
}
