package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// fails always fails, as a dependency that is down.
func fails(context.Context, *agent.Call) (any, error) {
	return nil, errors.New("connection refused")
}

// budgetEvents decodes the job's RetryBudgetExhausted events.
func budgetEvents(t *testing.T, ev *events) []messages.BudgetExhaustedEvent {
	t.Helper()
	var out []messages.BudgetExhaustedEvent
	for _, e := range ev.named(messages.EventTypeBudgetExhausted) {
		var d messages.BudgetExhaustedEvent
		require.NoError(t, json.Unmarshal(e.Data, &d))
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ItemID < out[j].ItemID })
	return out
}

// Each item is denied by its own per-item cap (retry_budget_per_item: 1,
// a job budget to spare): one retry each, then item_budget_exhausted, in
// its dead letter and in a RetryBudgetExhausted event naming the item,
// the scope and the cap. A job budget of 1, shared, denies the job scope.
func TestBudgetDenialsPerItemAndPerJob(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, map[string]agent.HandlerFunc{"call": fails})
	cl := client(t, srv)
	step := `[{"handler": "call", "retry_config": {"attempts": 5, "backoff": "fixed", "initial_delay": "10ms"}}]`

	ev := watchEvents(t, srv, "percap")
	id := submit(t, cl, `{"id": "percap", "items": `+itemsJSON(4, plainItem)+`, "agent_template": `+step+`,
		"retry_budget": 100, "retry_budget_per_item": 1}`)
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 4, st.DeadLettered)
	require.Equal(t, 4, st.Budget.Consumed, "one retry each; the job budget had 96 more")
	require.False(t, st.Budget.Exhausted)
	for _, e := range readDLQ(t, srv, id) {
		require.Equal(t, messages.ReasonItemBudget, e.Reason, "item %s", e.ItemID)
		require.Len(t, e.Attempts, 2, "item %s: the first run and its one retry", e.ItemID)
		require.Contains(t, e.Error, "item_budget_exhausted")
	}
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if len(budgetEvents(t, ev)) < 4 {
			return errNotYet
		}
		return nil
	})
	var want []messages.BudgetExhaustedEvent
	for i := range 4 {
		want = append(want, messages.BudgetExhaustedEvent{JobID: id, ItemID: plainItem(i)["id"].(string),
			Scope: budget.ScopeItem, Reason: messages.ReasonItemBudget, Consumed: 1, Limit: 1})
	}
	require.Equal(t, want, budgetEvents(t, ev))

	// A job budget of 1: the item that gets the retry then meets its own
	// cap (no per-item setting: the job's total, 1), checked first; the
	// others are denied by the job's.
	ev = watchEvents(t, srv, "jobcap")
	id = submit(t, cl, `{"id": "jobcap", "items": `+itemsJSON(3, plainItem)+`, "agent_template": `+step+`, "retry_budget": 1}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 3, st.DeadLettered)
	require.Equal(t, 1, st.Budget.Consumed)
	require.True(t, st.Budget.Exhausted)
	reasons := map[string]int{}
	for _, e := range readDLQ(t, srv, id) {
		reasons[e.Reason]++
	}
	require.Equal(t, map[string]int{messages.ReasonItemBudget: 1, messages.ReasonJobBudget: 2}, reasons)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if len(budgetEvents(t, ev)) < 3 {
			return errNotYet
		}
		return nil
	})
	scopes := map[string]int{}
	for _, d := range budgetEvents(t, ev) {
		scopes[d.Scope]++
		require.Equal(t, 1, d.Consumed, "%+v", d)
		require.Equal(t, 1, d.Limit, "%+v", d)
		require.Equal(t, d.Scope == budget.ScopeItem, d.Reason == messages.ReasonItemBudget, "%+v", d)
	}
	require.Equal(t, map[string]int{budget.ScopeItem: 1, budget.ScopeJob: 2}, scopes)
}

// A step's retry_budget through the agent, across an agent kill: the
// delays granted (jittered) add up in the item state whichever agent grants
// them, the crash redelivery spends nothing, and the step gives up when the
// next delay would take the sum past the budget, however long the runs and
// the crash took.
func TestStepRetryBudgetSurvivesAnAgentKill(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	hung := make(chan struct{})
	var a1Calls atomic.Int64
	a1 := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, map[string]agent.HandlerFunc{"call": func(ctx context.Context, _ *agent.Call) (any, error) {
		if a1Calls.Add(1) < 3 {
			return nil, errors.New("connection refused")
		}
		close(hung) // the third run hangs: a1 is killed in it
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	cl := client(t, srv)
	const budgetMS = 500
	id := submit(t, cl, `{"id": "sbk", "items": [{"id": "x"}], "agent_template": [{"handler": "call",
		"retry_config": {"attempts": 1000, "backoff": "fixed", "initial_delay": "100ms", "jitter": true, "jitter_factor": 0.3, "retry_budget": "500ms"}}]}`)
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the third run did not start")
	}
	a1.kill(t)
	startAgent(t, srv.URL(), agent.Config{Name: "a2"}, map[string]agent.HandlerFunc{"call": fails})
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)

	entries := readDLQ(t, srv, id)
	require.Len(t, entries, 1)
	e := entries[0]
	require.Equal(t, messages.ReasonRetryBudget, e.Reason)
	var granted time.Duration
	agents := map[string]int{}
	for _, a := range e.Attempts {
		agents[a.Agent]++
		if a.Decision == "retry" {
			granted += time.Duration(a.DelayMS) * time.Millisecond
		}
	}
	require.Equal(t, 2, agents["a1"], "a1's two failed runs (its third was cut by the kill, unrecorded)")
	require.Positive(t, agents["a2"])
	// The exact sum, jitter included, is in the item state a2 finished.
	kv, err := srv.JS().KeyValue(context.Background(), names(t).ItemsBucket())
	require.NoError(t, err)
	ent, err := kv.Get(context.Background(), wire.ItemKey(messages.DefaultPool, id, "x"))
	require.NoError(t, err)
	var is wire.ItemState
	require.NoError(t, json.Unmarshal(ent.Value(), &is))
	spent := is.StepDelaySpent.D()
	require.LessOrEqual(t, spent, budgetMS*time.Millisecond, "never past the budget, across agents")
	require.Greater(t, spent+130*time.Millisecond, budgetMS*time.Millisecond, "stopped only when the next delay (at most 130ms) would pass it")
	require.InDelta(t, float64(spent), float64(granted), float64(len(e.Attempts))*float64(time.Millisecond), "the history's delays (in whole ms) add up to it")
	require.GreaterOrEqual(t, agents["a1"]+agents["a2"], 5, "at least 500ms / 130ms retries, plus the first run")
}

// on_failure through the agent: continue goes on with the next step, and
// the item can succeed; a fallback that succeeds stands in for the step, its
// output as the step's; a fallback that fails fails the item with both
// errors.
func TestOnFailureContinueAndFallback(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var nextRan atomic.Int64
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, map[string]agent.HandlerFunc{
		"call": fails,
		"next": func(context.Context, *agent.Call) (any, error) { nextRan.Add(1); return "next-ran", nil },
	})
	cl := client(t, srv)
	failing := `"retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "10ms", "on_failure": `

	id := submit(t, cl, `{"id": "cont", "items": [{"id": "x"}], "agent_template": [
		{"handler": "call", `+failing+`"continue"}}, {"handler": "next"}]}`)
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, nextRan.Load())
	res := jobResults(t, srv.JS(), id)
	require.Len(t, res, 1)
	require.Equal(t, "next-ran", res[0].Output)
	require.Equal(t, 3, res[0].Attempts, "two failed runs of step 1, one of step 2")

	id = submit(t, cl, `{"id": "fb-ok", "items": [{"id": "x"}], "agent_template": [
		{"handler": "call", `+failing+`{"fallback": {"command": "echo saved-${item.id}"}}}}]}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	res = jobResults(t, srv.JS(), id)
	require.Len(t, res, 1)
	require.Equal(t, "saved-x\n", res[0].Output, "the fallback's output is the step's")

	id = submit(t, cl, `{"id": "fb-fails", "items": [{"id": "x"}], "agent_template": [
		{"handler": "call", `+failing+`{"fallback": {"command": "echo disk full >&2; exit 4"}}}}]}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	entries := readDLQ(t, srv, id)
	require.Len(t, entries, 1)
	require.Equal(t, messages.ReasonAttempts, entries[0].Reason)
	require.Contains(t, entries[0].Error, "connection refused", "the step's error")
	require.Contains(t, entries[0].Error, "fallback", "and the fallback's")
	require.Contains(t, entries[0].Error, "disk full")
}
