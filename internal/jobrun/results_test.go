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
