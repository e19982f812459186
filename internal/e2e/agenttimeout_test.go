package e2e

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// agent_timeout (the source documents' agent timeout, which backoff delays
// count toward) bounds an item's run: two quick failures and their delays,
// then a run that hangs is cut when the item's time is up, however long the
// step's own timeout, and the item fails with agent_timeout.
func TestAgentTimeoutCutsARunAndCountsTheDelays(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var (
		mu       sync.Mutex
		starts   []time.Time
		deadline time.Time
	)
	hang := func(ctx context.Context, _ *agent.Call) (any, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		n := len(starts)
		mu.Unlock()
		if n < 3 {
			return nil, errors.New("503 Service Unavailable")
		}
		mu.Lock()
		deadline, _ = ctx.Deadline()
		mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, map[string]agent.HandlerFunc{"hang": hang})
	cl := client(t, srv)
	// 5 s for the item: room for two failed runs and their 200 ms delays
	// on a loaded machine (with 1 s, one run in a parallel suite at load
	// 22 used it all up).
	id := submit(t, cl, `{"id": "at", "items": [{"id": "x"}], "agent_timeout": "5s", "agent_template": [
		{"handler": "hang", "timeout": "1h", "retry_config": {"attempts": 10, "backoff": "fixed", "initial_delay": "200ms"}}]}`)
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, starts, 3)
	require.GreaterOrEqual(t, starts[1].Sub(starts[0]), 200*time.Millisecond, "the delays count toward it")
	require.GreaterOrEqual(t, starts[2].Sub(starts[1]), 200*time.Millisecond)
	// The third run's timeout is what was left of the item's 5 s, not the
	// step's hour: it ends five seconds after the first run began.
	require.WithinDuration(t, starts[0].Add(5*time.Second), deadline, 100*time.Millisecond)
	entries := readDLQ(t, srv, id)
	require.Len(t, entries, 1)
	require.Equal(t, messages.ReasonAgentTimeout, entries[0].Reason)
	last := entries[0].Attempts[len(entries[0].Attempts)-1]
	require.True(t, last.TimedOut, "%+v", last)
	require.Equal(t, 3, last.Attempt)
}

// The item's start is persisted with its state, so agent_timeout holds
// across agents: an agent killed in the item's second run leaves it to
// another, which finds its time up (the crash redelivery comes after
// AckWait, 2s here) and fails it without running it again.
func TestAgentTimeoutHoldsAcrossAgents(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	second := make(chan struct{})
	var calls atomic.Int64
	first := func(ctx context.Context, _ *agent.Call) (any, error) {
		if calls.Add(1) == 1 {
			return nil, errors.New("503 Service Unavailable")
		}
		close(second)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a1 := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, map[string]agent.HandlerFunc{"call": first})
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "at2", "items": [{"id": "x"}], "agent_timeout": "1500ms", "agent_template": [
		{"handler": "call", "retry_config": {"attempts": 10, "backoff": "fixed", "initial_delay": "300ms"}}]}`)
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the second run did not start")
	}
	a1.kill(t)

	var later atomic.Int64
	startAgent(t, srv.URL(), agent.Config{Name: "a2"}, map[string]agent.HandlerFunc{"call": func(context.Context, *agent.Call) (any, error) {
		later.Add(1)
		return "ok", nil
	}})
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "its time was up when a2 got it")
	require.Zero(t, later.Load(), "a2 did not run it: the clock started at its first run, on a1")
	entries := readDLQ(t, srv, id)
	require.Len(t, entries, 1)
	require.Equal(t, messages.ReasonAgentTimeout, entries[0].Reason)
	last := entries[0].Attempts[len(entries[0].Attempts)-1]
	require.True(t, last.NotRun, "%+v", last)
	require.Equal(t, "a2", last.Agent)
}
