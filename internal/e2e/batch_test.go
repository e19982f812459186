package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An agent that dies with results batched but not yet published, after
// others were published and their work messages acked: the published
// items are not run again, the unpublished ones are (after AckWait), and
// every item is counted exactly once.
func TestAgentKilledWithBatchedResultsPending(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	const n, batch = 25, 10
	victimRuns, survivorRuns := newRecorder(), newRecorder()
	// Batches of 10 and a linger longer than the test: 20 results leave in
	// two messages, the last 5 wait in the batcher until the agent dies.
	victim := startAgent(t, srv.URL(), agent.Config{Name: "victim", Concurrency: 1, ResultBatch: batch, ResultLinger: agent.MaxResultLinger},
		map[string]agent.HandlerFunc{"work": victimRuns.handler(0)})
	cl := client(t, srv)
	id := submit(t, cl, fmt.Sprintf(`{"id": "batched", "items": %s, "agent_template": [{"handler": "work"}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("it-%02d", i)} })))

	names := messages.MustNames("")
	ctx := context.Background()
	fleettest.WaitFor(t, 20*time.Second, func() error {
		// At least: AckWait (2s) may hand the victim its unacked items again.
		if runs := victimRuns.total(); runs < n {
			return fmt.Errorf("victim ran %d of %d items", runs, n)
		}
		cons, err := srv.JS().Consumer(ctx, names.WorkStream(), names.AgentsConsumer(messages.DefaultPool))
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != n-2*batch {
			return fmt.Errorf("%d work messages unacked, want %d", info.NumAckPending, n-2*batch)
		}
		st, err := cl.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.Succeeded != 2*batch {
			return fmt.Errorf("%d items counted, want the two published batches' %d", st.Succeeded, 2*batch)
		}
		return nil
	})
	victim.kill(t) // the last 5 results are never published

	startAgent(t, srv.URL(), agent.Config{Name: "survivor", Concurrency: 2},
		map[string]agent.HandlerFunc{"work": survivorRuns.handler(0)})
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded, "every item counted once")
	require.Equal(t, n-2*batch, survivorRuns.total(), "only the items whose results were lost ran again")
	for i := range n {
		item := fmt.Sprintf("it-%02d", i)
		if i < 2*batch {
			require.Equal(t, 1, victimRuns.count(item), "item %s ran once", item)
			require.Zero(t, survivorRuns.count(item), "item %s, counted, did not run again", item)
		} else {
			require.Equal(t, 1, survivorRuns.count(item), "item %s, its result lost, ran again", item)
		}
	}
	results := jobResults(t, srv.JS(), id)
	require.Len(t, results, n, "each item's result stored once")
}
