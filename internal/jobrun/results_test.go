package jobrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A coordinator that takes over a job catches up on its stored results
// and then follows the shared results consumer, while results keep
// arriving: each item counts once, and the results stream keeps one
// consumer per leader.
func TestResultsCatchUpThenFollowWithoutDoubleCounting(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p1 := startCoord(t, srv, Config{})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	const items = 400
	nums := make([]string, items)
	for i := range nums {
		nums[i] = fmt.Sprint(i)
	}
	_, err = cl.Submit(context.Background(), []byte(`{"id": "hand", "pool": "idle", "items": [`+strings.Join(nums, ",")+`], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	waitState(t, cl, "hand", messages.StateRunning)
	js := srv.JS()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			// Every result twice, as an agent that re-ran the item would.
			for range 2 {
				data, _ := json.Marshal(messages.Result{JobID: "hand", ItemID: fmt.Sprint(i), Index: int64(i), Outcome: messages.OutcomeSucceeded})
				_, err := js.Publish(context.Background(), "fleet.results.idle.hand", data)
				require.NoError(t, err)
			}
		}
	}
	publish(0, items/2)
	p1.stop(t)
	// The next leader catches up on the first half while the second
	// half arrives.
	_, p2 := startCoord(t, srv, Config{})
	defer p2.stop(t)
	publish(items/2, items)
	st := waitState(t, cl, "hand", messages.StateSucceeded)
	require.Equal(t, int64(items), st.Succeeded)
	require.Equal(t, int64(items), st.Done())
	fleettest.WaitFor(t, 30*time.Second, func() error {
		s, err := js.Stream(context.Background(), "FLEET_RESULTS")
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Consumers; n != 1 {
			return fmt.Errorf("%d results consumers", n)
		}
		return nil
	})
}

// A leader's catch-up whose ordered consumer sits on a replica that lags
// the stream's leader (one back from a cut-off: an ordered consumer has
// one replica, on any server of the stream's) reads on until it has what
// the leader holds: that replica's "nothing pending" does not end it. It
// did once, and the results between the replica's end and the hub's start
// were never counted: the job stayed at 88 of 1,600 for good
// (TestCutOffCoordinatorHandsOver).
func TestResultsCatchUpReadsPastALaggingReplica(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p1 := startCoord(t, srv, Config{})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	const items, held = 200, 50
	nums := make([]string, items)
	for i := range nums {
		nums[i] = fmt.Sprint(i)
	}
	_, err = cl.Submit(context.Background(), []byte(`{"id": "lag", "pool": "idle", "items": [`+strings.Join(nums, ",")+`], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	waitState(t, cl, "lag", messages.StateRunning)
	js := srv.JS()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			data, _ := json.Marshal(messages.Result{JobID: "lag", ItemID: fmt.Sprint(i), Index: int64(i), Outcome: messages.OutcomeSucceeded})
			_, err := js.Publish(context.Background(), "fleet.results.idle.lag", data)
			require.NoError(t, err)
		}
	}
	publish(0, items-held)
	p1.stop(t)
	// The next leader's catch-up reads through a replica that holds the
	// first held results only, until the test lets it catch up; the last
	// held results come meanwhile, to the hub.
	lag := fleettest.NewLaggingReplica(held)
	startCoordConfig(t, srv, Config{}, func(c *Coordinator) { c.replica = lag.Stream })
	publish(items-held, items)
	select {
	case <-lag.Asked():
	case <-time.After(20 * time.Second):
		st, _ := cl.Status(context.Background(), "lag")
		t.Fatalf("the catch-up stopped at the lagging replica's end: it did not ask for more; status %+v", st)
	}
	lag.CatchUp()
	st := waitState(t, cl, "lag", messages.StateSucceeded)
	require.Equal(t, int64(items), st.Succeeded)
}
