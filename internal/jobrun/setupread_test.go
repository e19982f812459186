package jobrun

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The read of a job's setup result whose ordered consumer sits on a
// replica that applies nothing (a node whose store is full) fails once
// nothing came for setupIdle while the stream's leader holds a result past
// the last one read, rather than wait for good; runSetup then reads again
// with a new consumer, which the server places elsewhere.
func TestSetupResultLeavesAReplicaThatAppliesNothing(t *testing.T) {
	checkLeaks(t)
	old := setupIdle
	setupIdle = 100 * time.Millisecond
	t.Cleanup(func() { setupIdle = old })
	srv := fleettest.RunServer(t)
	// The results stream is empty: the first consumer, on the stale
	// replica, delivers nothing of what follows.
	stale := fleettest.NewStaleReplica("n2", 0, 1)
	var coord *Coordinator
	startCoordConfig(t, srv, Config{}, func(c *Coordinator) {
		coord = c
		c.replica = stale.Stream
	})
	data, err := json.Marshal(messages.Result{JobID: "su", ItemID: "setup", Phase: messages.PhaseSetup, Outcome: messages.OutcomeSucceeded})
	require.NoError(t, err)
	_, err = srv.JS().Publish(context.Background(), "fleet.results.idle.su", data)
	require.NoError(t, err)
	rec := wire.JobRecord{Spec: &messages.JobSpec{Pool: "idle"}, Status: messages.JobStatus{ID: "su"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = coord.setupResult(ctx, rec)
	require.ErrorContains(t, err, "while the stream's leader holds more", "the read on the stale replica gave up")
	require.NoError(t, ctx.Err())
	res, err := coord.setupResult(ctx, rec)
	require.NoError(t, err)
	require.Equal(t, messages.PhaseSetup, res.Phase)
	require.Equal(t, 2, stale.Made())
}
