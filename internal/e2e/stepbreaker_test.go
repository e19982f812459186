package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A step's own circuit breaker (retry_config.circuit_breaker, the source
// documents' per-executor breaker) is shared by the fleet: the failures two
// agents see open it, and then every run of the step on either agent fails
// fast, without calling the dependency, its on_failure applying (here:
// stop, so dead letters with reason circuit_open). Other steps and jobs are
// not affected.
func TestStepBreakerFailsFastAcrossTheFleet(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var calls atomic.Int64
	down := func(context.Context, *agent.Call) (any, error) {
		calls.Add(1)
		return nil, errors.New("503 Service Unavailable")
	}
	handlers := map[string]agent.HandlerFunc{"upload": down}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1, Prefetch: 1, Registerer: regs[0]}, handlers)
	startAgent(t, srv.URL(), agent.Config{Name: "a2", Concurrency: 1, Prefetch: 1, Registerer: regs[1]}, handlers)
	cl := client(t, srv)
	ev := watchEvents(t, srv, "sb")
	id := submit(t, cl, `{"id": "sb", "items": `+itemsJSON(20, plainItem)+`, "agent_template": [
		{"name": "prepare", "handler": "noop"},
		{"name": "upload", "handler": "upload", "retry_config": {"attempts": 1, "circuit_breaker": {"failure_threshold": 3, "timeout": "1h"}}}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 20, st.DeadLettered)

	// Three failures open it; a run admitted while the third was under
	// way (one per other agent) may fail too.
	n := calls.Load()
	require.GreaterOrEqual(t, n, int64(3))
	require.LessOrEqual(t, n, int64(4))
	reasons := map[string]int{}
	for _, e := range readDLQ(t, srv, id) {
		reasons[e.Reason]++
		last := e.Attempts[len(e.Attempts)-1]
		require.Equal(t, 1, last.Step, "the upload step")
		if e.Reason == messages.ReasonCircuitOpen {
			require.True(t, last.NotRun, "failed fast, without running: %+v", last)
			require.Contains(t, e.Error, "circuit breaker open")
		}
	}
	require.Equal(t, map[string]int{messages.ReasonAttempts: int(n), messages.ReasonCircuitOpen: 20 - int(n)}, reasons)
	require.EqualValues(t, 20-n, sumCounter(t, regs, "jetfleet_agent_breaker_failed_fast_total"))

	// One transition, announced with the step; the job's own breaker (it
	// has none) is not in the job's status.
	changes := ev.waitFor(t, messages.EventTypeBreakerChanged, 1)
	require.Len(t, changes, 1)
	var change messages.BreakerChangedEvent
	require.NoError(t, json.Unmarshal(changes[0].Data, &change))
	require.NotNil(t, change.Step)
	require.Equal(t, 1, *change.Step)
	require.Equal(t, "upload", change.StepName)
	require.Equal(t, "closed", change.From)
	require.Equal(t, "open", change.To)
	require.Equal(t, 3, change.Failures)
	require.Nil(t, st.Breaker)

	// Another job's step has its own breaker: closed.
	calls.Store(0)
	id = submit(t, cl, `{"id": "sb2", "items": `+itemsJSON(2, plainItem)+`, "agent_template": [
		{"handler": "upload", "retry_config": {"attempts": 1, "circuit_breaker": {"failure_threshold": 3, "timeout": "1h"}}}]}`)
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 2, calls.Load(), "sb's open breaker is not sb2's")
	require.EqualValues(t, 2, st.DeadLettered)
}

// With on_failure: fallback the open breaker sends every item straight to
// the fallback (the source documents' upload-with-local-fallback); once its
// timeout has passed, the next run is a half-open probe, whose success
// closes it again.
func TestStepBreakerFallbackAndRecovery(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	cl := client(t, srv)
	ev := watchEvents(t, srv, "fb")
	var calls, throughStep1 atomic.Int64
	var openedAt time.Time // prepare's own: the agent runs one item at a time
	// Item "late" waits at its first step (snoozing, which spends nothing)
	// until the four others are through the upload step and the breaker's
	// timeout has passed since it opened.
	prepare := func(_ context.Context, c *agent.Call) (any, error) {
		if c.ItemID != "late" {
			return nil, nil
		}
		if openedAt.IsZero() { // when this test saw the breaker open (after it did)
			if len(ev.named(messages.EventTypeBreakerChanged)) == 0 {
				return nil, retry.Snooze(50 * time.Millisecond)
			}
			openedAt = time.Now()
		}
		if throughStep1.Load() < 4 || time.Since(openedAt) < 2100*time.Millisecond {
			return nil, retry.Snooze(50 * time.Millisecond)
		}
		return nil, nil
	}
	// The dependency fails the four first items and is back for the last.
	upload := func(_ context.Context, c *agent.Call) (any, error) {
		calls.Add(1)
		if c.ItemID == "late" {
			return "uploaded", nil
		}
		return nil, errors.New("503 Service Unavailable")
	}
	count := func(_ context.Context, c *agent.Call) (any, error) {
		if c.ItemID != "late" {
			throughStep1.Add(1)
		}
		return nil, nil
	}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1, Prefetch: 1},
		map[string]agent.HandlerFunc{"prepare": prepare, "upload": upload, "count": count})
	submit(t, cl, `{"id": "fb", "items": [{"id": "i1"}, {"id": "i2"}, {"id": "i3"}, {"id": "i4"}, {"id": "late"}], "agent_template": [
		{"handler": "prepare"},
		{"handler": "upload", "retry_config": {"attempts": 1, "on_failure": {"fallback": {"command": "echo saved-locally"}},
			"circuit_breaker": {"failure_threshold": 2, "success_threshold": 1, "timeout": "2s", "half_open_requests": 1}}},
		{"handler": "count"}]}`)
	st := waitJob(t, cl, "fb", 60*time.Second)
	require.EqualValues(t, 5, st.Succeeded, "four through the fallback, one uploaded")
	// (Items i3 and i4 meet it open: 2s is long enough that they cannot
	// come after its timeout, even on a slow machine.)
	require.EqualValues(t, 3, calls.Load(), "two failures open it; two fail fast to the fallback; the probe succeeds")
	var tos []string
	for _, c := range ev.named(messages.EventTypeBreakerChanged) {
		var change messages.BreakerChangedEvent
		require.NoError(t, json.Unmarshal(c.Data, &change))
		tos = append(tos, change.To)
	}
	require.Equal(t, []string{"open", "half_open", "closed"}, tos)
}
