package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
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

// The leader's results hub reads through an ordered consumer placed on a
// replica that applies nothing (a node whose store is full): it delivers
// none of the job's results, says nothing is pending and stays alive, so
// it never resets itself. The hub, idle with a job open, sees the stream's
// leader hold results it was not handed for hubStallAfter and makes its
// consumer again, off that node (once more when the server places the new
// one there too); the job ends with every item counted once. Before, the
// job waited for the placement sweep to delete the consumer, which one
// full node's own answers kept from happening for minutes
// (TestStoreFullOneNodeOfThree, docs/deploy.md "A full store").
func TestResultsHubLeavesAReplicaThatAppliesNothing(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	// The results stream is empty: the replica holds nothing the hub is to
	// deliver, and the first two consumers are placed on it.
	stale := fleettest.NewStaleReplica("n2", 0, 2)
	clk := clock.NewManual(time.Now())
	var coord *Coordinator
	startCoordConfig(t, srv, Config{}, func(c *Coordinator) {
		coord = c
		c.hubOpts = hubOptions{follow: stale.Stream, clock: clk}
	})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	const items = 100
	nums := make([]string, items)
	for i := range nums {
		nums[i] = fmt.Sprint(i)
	}
	_, err = cl.Submit(context.Background(), []byte(`{"id": "stale", "pool": "idle", "items": [`+strings.Join(nums, ",")+`], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	waitState(t, cl, "stale", messages.StateRunning)
	// The runner has caught up (on no results): from now on only the hub
	// brings them.
	var r *jobRunner
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if r = coord.runner("stale"); r == nil {
			return errors.New("no runner yet")
		}
		return nil
	})
	<-r.caughtUp
	js := srv.JS()
	for i := range items {
		data, _ := json.Marshal(messages.Result{JobID: "stale", ItemID: fmt.Sprint(i), Index: int64(i), Outcome: messages.OutcomeSucceeded})
		_, err := js.Publish(context.Background(), "fleet.results.idle.stale", data)
		require.NoError(t, err)
	}
	select {
	case <-stale.Withheld():
	case <-time.After(20 * time.Second):
		t.Fatal("the hub's consumer was never handed a result")
	}
	st, err := cl.Status(context.Background(), "stale")
	require.NoError(t, err)
	require.Zero(t, st.Done(), "the replica held no result")
	require.Equal(t, 1, stale.Made(), "no consumer made again before the watch looked")
	// The watch's clock moves one check at a time until the job ends.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		clk.Advance(hubCheckEvery)
		st, err := cl.Status(context.Background(), "stale")
		if err != nil {
			return err
		}
		if st.State != messages.StateSucceeded {
			return fmt.Errorf("state %s, %d done", st.State, st.Done())
		}
		return nil
	})
	st = waitState(t, cl, "stale", messages.StateSucceeded)
	require.Equal(t, int64(items), st.Succeeded, "every item counted once")
	require.Equal(t, 3, stale.Made(), "the first on the replica, one more placed there and made again, one elsewhere")
}
