package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The failure path without a server: the pure verdicts first, then whole
// deliveries through process with fakes of everything it reads and writes.

var (
	errBoom = errors.New("boom")
	t0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
)

// failureAgent is an agent wired to fakes of everything its item path
// touches: no server, a hand-moved clock, jitter-free policies.
type failureAgent struct {
	a        *Agent
	clk      *clock.Manual
	reg      *prometheus.Registry
	items    *fakeItems
	budget   *fakeBudget
	dlq      *fakeDLQ
	pub      *fakePub
	breakers *fakeBreakers
	// localDelays are the delays of the local retries queued (localRetries).
	localDelays []time.Duration
	// lastMsg is the work message of the last delivery.
	lastMsg *recMsg
}

const testMaxDeliver = 5

func newFailureAgent(t *testing.T) *failureAgent {
	t.Helper()
	clk := clock.NewManual(t0)
	f := &failureAgent{
		clk: clk, reg: prometheus.NewRegistry(), items: &fakeItems{m: map[string]fakeEntry{}},
		budget: &fakeBudget{}, dlq: &fakeDLQ{}, pub: &fakePub{}, breakers: &fakeBreakers{clk: clk, m: map[string]retry.BreakerState{}},
	}
	f.a = New(nil, Config{Name: "a1", hooks: testhooks.Agent{Clock: clk, Rand: halfDraw}, ParkAfter: -1}) // delayed naks; park_test.go parks
	f.a.log = zerolog.Nop()
	f.a.names = testNames
	f.a.pub, f.a.items, f.a.budget, f.a.dlq, f.a.breakers = f.pub, f.items, f.budget, f.dlq, f.breakers
	f.a.jobs = newJobCache(nil, nil)
	f.a.metrics = newMetrics(f.reg)
	f.a.hb = time.Hour
	f.a.maxDeliver = testMaxDeliver
	f.a.maxPayloadOf = func() int64 { return 1 << 20 }
	f.a.Handle("ok", func(context.Context, *Call) (any, error) { return "done", nil })
	f.a.Handle("fail", func(context.Context, *Call) (any, error) { return nil, errBoom })
	f.a.Handle("permanent", func(context.Context, *Call) (any, error) { return nil, retry.Permanent(errBoom) })
	f.a.Handle("snooze", func(context.Context, *Call) (any, error) { return nil, retry.Snooze(5 * time.Second) })
	f.a.Handle("slow-fail", func(context.Context, *Call) (any, error) {
		clk.Advance(1500 * time.Millisecond)
		return nil, errBoom
	})
	return f
}

// localRetries lets the agent retry short delays itself (localretry.go),
// its consumer's AckWait being ackWait; the delays it waits are recorded
// in f.localDelays, and none ever comes due.
func (f *failureAgent) localRetries(ackWait time.Duration) {
	f.a.ackWait, f.a.cfg.LocalRetryMax = ackWait, time.Second
	f.a.localRetries = newLocalRetries()
	f.a.localRetries.afterFunc = func(d time.Duration, _ func()) interface{ Stop() bool } {
		f.localDelays = append(f.localDelays, d)
		return &gatedTimer{}
	}
}

// job compiles a job of steps (a JSON agent_template) and error policy (a
// JSON error_policy, or "") and caches it as the job cache would.
func (f *failureAgent) job(t *testing.T, id, steps, errorPolicy string) *job {
	t.Helper()
	spec := &messages.JobSpec{ID: id}
	require.NoError(t, json.Unmarshal([]byte(steps), &spec.AgentTemplate))
	if errorPolicy != "" {
		spec.ErrorPolicy = &messages.ErrorPolicy{}
		require.NoError(t, json.Unmarshal([]byte(errorPolicy), spec.ErrorPolicy))
	}
	j, err := compileJob(id, spec)
	require.NoError(t, err)
	f.a.jobs.m[id] = j
	return j
}

// deliver runs delivery n of item i1 of job j through process and the ack
// loop, and returns the work message.
func (f *failureAgent) deliver(t *testing.T, j *job, n uint64) *recMsg {
	t.Helper()
	return f.deliverPark(t, j, n, 0)
}

// deliverPark is deliver of the item's park-th parked copy (0: the
// coordinator's message).
func (f *failureAgent) deliverPark(t *testing.T, j *job, n uint64, park int) *recMsg {
	t.Helper()
	data, err := json.Marshal(wire.WorkItem{JobID: j.id, ItemID: "i1", Index: 7, Payload: json.RawMessage(`{"n":1}`), Park: park})
	require.NoError(t, err)
	m := &recMsg{subject: testNames.WorkSubject(messages.DefaultPool, j.id), data: data,
		md: jetstream.MsgMetadata{NumDelivered: n, Sequence: jetstream.SequencePair{Stream: 42}}}
	f.a.results = make(chan pendingResult, 16)
	f.a.acks = make(chan pendingAck, 16)
	f.a.safeProcessOn(context.Background(), m, &hbSlot{}, nil)
	close(f.a.results)
	f.a.batchLoop() // publishes what it holds at once, the input being closed
	f.a.ackLoop()   // the fake PubAcks are in: acks or terms at once
	f.lastMsg = m
	return m
}

// state is the item's stored state (nil: none).
func (f *failureAgent) state(t *testing.T, j *job) *wire.ItemState {
	t.Helper()
	e, ok := f.items.m[wire.ItemKey(messages.DefaultPool, j.id, "i1")]
	if !ok {
		return nil
	}
	var st wire.ItemState
	require.NoError(t, json.Unmarshal(e.value, &st))
	return &st
}

// store stores st as the item's state, as an earlier delivery would have.
func (f *failureAgent) store(t *testing.T, j *job, st wire.ItemState) {
	t.Helper()
	st.JobID, st.ItemID = j.id, "i1"
	data, err := json.Marshal(st)
	require.NoError(t, err)
	_, err = f.items.Create(context.Background(), wire.ItemKey(messages.DefaultPool, j.id, "i1"), data)
	require.NoError(t, err)
}

// TestFailurePath runs deliveries that fail through the agent's whole
// failure path, one per end state, and checks what it did: the message's
// disposition, the stored item state, the budget claims, the dead letter,
// the result and the events.
func TestFailurePath(t *testing.T) {
	const oneStep = `[{"handler":"fail","retry_config":{"attempts":1}}]`
	type want struct {
		msg       string   // the work message's disposition: "nak 2s", "term", "ack", "" (left alone)
		result    string   // the published result's outcome, "" for none
		reason    string   // the result's reason (and the dead letter's)
		errorHas  string   // the result's error contains it
		output    string   // the result's output
		dlq       bool     // a dead letter was written
		final     string   // the stored state's Final
		decisions []string // the stored history's decisions; nil: no state stored
		step      int      // the stored state's step
		attempt   int      // the stored state's step attempt
		retries   int      // the stored state's retries
		itemRun   int      // the stored state's whole-item run
		claims    []int    // the item retries each budget claim was made with
		events    []string // the event types published
		metric    string   // jetfleet_agent_retries_total{kind=metric} is 1
	}
	cases := []struct {
		name        string
		steps       string
		errorPolicy string
		delivery    uint64                                // NumDelivered; 1 if 0
		before      *wire.ItemState                       // stored by an earlier delivery
		setup       func(f *failureAgent)                 // breaks what the case needs broken
		check       func(*testing.T, *failureAgent, *job) // more checks
		want        want
	}{
		{
			name: "retry: state saved, then a delayed nak", steps: `[{"handler":"fail","retry_config":{"initial_delay":"2s"}}]`,
			want: want{msg: "nak 2s", decisions: []string{"retry"}, attempt: 1, retries: 1, claims: []int{0}, metric: "retry"},
		},
		{
			name: "retry of a redelivery: the budget is asked with the item's retries", steps: `[{"handler":"fail","retry_config":{"initial_delay":"2s","attempts":5}}]`,
			delivery: 2, before: &wire.ItemState{StepAttempt: 1, Retries: 1, StepFirstFailure: t0.Add(-time.Minute), StepDelaySpent: messages.Duration(2 * time.Second), LastDelay: messages.Duration(2 * time.Second)},
			want: want{msg: "nak 4s", decisions: []string{"retry"}, attempt: 2, retries: 2, claims: []int{1}, metric: "retry"},
		},
		{
			name: "short retry: it waits in the agent with its state unwritten, the message left alone; written when it leaves", steps: `[{"handler":"fail","retry_config":{"initial_delay":"100ms"}}]`,
			setup: func(f *failureAgent) { f.localRetries(30 * time.Second) },
			check: func(t *testing.T, f *failureAgent, j *job) {
				require.Equal(t, 1.0, counter(t, f.reg, "jetfleet_agent_local_retries_total"))
				require.Equal(t, []time.Duration{100 * time.Millisecond}, f.localDelays)
				require.Len(t, f.a.localRetries.waiting, 1)
				var r *localRetry
				for r = range f.a.localRetries.waiting {
				}
				require.True(t, r.unwritten)
				require.Equal(t, 1, r.st.StepAttempt)
				require.Equal(t, 1, r.st.Retries)
				require.Len(t, r.st.History, 1)

				// The agent stops: the state is written, then the message naked.
				f.a.localRetries.close()
				st := f.state(t, j)
				require.NotNil(t, st, "the state written as the retry left the agent")
				require.Equal(t, 1, st.StepAttempt)
				require.Equal(t, 1, st.Retries)
				require.Len(t, st.History, 1)
				require.Equal(t, "retry", st.History[0].Decision)
				require.Contains(t, f.lastMsg.disposition(), "nak ")
			},
			want: want{msg: "", claims: []int{0}, metric: "retry"},
		},
		{
			name: "short retry, LocalRetryDurable: state written first, then it waits in the agent", steps: `[{"handler":"fail","retry_config":{"initial_delay":"100ms"}}]`,
			setup: func(f *failureAgent) { f.localRetries(30 * time.Second); f.a.cfg.LocalRetryDurable = true },
			check: func(t *testing.T, f *failureAgent, _ *job) {
				require.Equal(t, 1.0, counter(t, f.reg, "jetfleet_agent_local_retries_total"))
				require.Equal(t, []time.Duration{100 * time.Millisecond}, f.localDelays)
				for r := range f.a.localRetries.waiting {
					require.False(t, r.unwritten)
				}
			},
			want: want{msg: "", decisions: []string{"retry"}, attempt: 1, retries: 1, claims: []int{0}, metric: "retry"},
		},
		{
			name: "short retry of a step with a retry_budget: state written first (the time spent survives a crash)", steps: `[{"handler":"fail","retry_config":{"initial_delay":"100ms","retry_budget":"10s"}}]`,
			setup: func(f *failureAgent) { f.localRetries(30 * time.Second) },
			check: func(t *testing.T, f *failureAgent, _ *job) {
				require.Equal(t, 1.0, counter(t, f.reg, "jetfleet_agent_local_retries_total"))
				for r := range f.a.localRetries.waiting {
					require.False(t, r.unwritten)
				}
			},
			want: want{msg: "", decisions: []string{"retry"}, attempt: 1, retries: 1, claims: []int{0}, metric: "retry"},
		},
		{
			name: "short retry late in its AckWait: a delayed nak", steps: `[{"handler":"slow-fail","retry_config":{"initial_delay":"100ms"}}]`,
			setup: func(f *failureAgent) { f.localRetries(3 * time.Second) }, // the run took half of AckWait
			check: func(t *testing.T, f *failureAgent, _ *job) {
				require.Zero(t, counter(t, f.reg, "jetfleet_agent_local_retries_total"))
			},
			want: want{msg: "nak 100ms", decisions: []string{"retry"}, attempt: 1, retries: 1, claims: []int{0}, metric: "retry"},
		},
		{
			name: "snooze: nothing counted or claimed", steps: `[{"handler":"snooze"}]`,
			want: want{msg: "nak 5s", decisions: []string{"snooze"}, metric: "snooze"},
		},
		{
			name: "give up: attempts", steps: oneStep,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonAttempts, errorHas: "gave up after 1 attempts: boom",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "give up: retry_budget", steps: `[{"handler":"fail","retry_config":{"initial_delay":"10s","retry_budget":"5s"}}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonRetryBudget,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "give up: not_retryable", steps: `[{"handler":"fail","retry_config":{"retry_on":["rate_limit"]}}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonNotRetryable,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "give up: permanent", steps: `[{"handler":"permanent"}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonPermanent,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "give up: item budget", steps: `[{"handler":"fail"}]`,
			setup: func(f *failureAgent) {
				f.budget.grant = budget.Grant{Deny: &budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 0, Limit: 0}}
			},
			check: func(t *testing.T, f *failureAgent, j *job) {
				var ev messages.Event
				require.NoError(t, json.Unmarshal(f.pub.events[0].Data, &ev))
				var d messages.BudgetExhaustedEvent
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				require.Equal(t, messages.BudgetExhaustedEvent{JobID: j.id, ItemID: "i1", Scope: budget.ScopeItem, Reason: messages.ReasonItemBudget}, d)
				require.Equal(t, wire.AgentEventSubject(testNames, messages.DefaultPool, j.id, messages.EventBudget), f.pub.events[0].Subject)
				require.Equal(t, j.id, f.pub.events[0].Header.Get(messages.HeaderJobID))
			},
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonItemBudget, errorHas: "item_budget_exhausted",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1, claims: []int{0},
				events: []string{messages.EventTypeBudgetExhausted}},
		},
		{
			name: "give up: job budget", steps: `[{"handler":"fail"}]`,
			setup: func(f *failureAgent) {
				f.budget.grant = budget.Grant{Deny: &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 10, Limit: 10}}
			},
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonJobBudget,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1, claims: []int{0},
				events: []string{messages.EventTypeBudgetExhausted}},
		},
		{
			name: "give up: the last delivery, without a claim", steps: `[{"handler":"fail","retry_config":{"attempts":10}}]`,
			delivery: testMaxDeliver,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonMaxDeliveries, errorHas: "boom",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "on_failure continue: the next step runs", steps: `[{"handler":"fail","retry_config":{"attempts":1,"on_failure":"continue"}},{"handler":"ok"}]`,
			want: want{msg: "ack", result: messages.OutcomeSucceeded, output: "done"},
		},
		{
			name: "on_failure fallback ok: its output is the step's", steps: `[{"handler":"fail","retry_config":{"attempts":1,"on_failure":{"fallback":{"command":"echo saved"}}}}]`,
			want: want{msg: "ack", result: messages.OutcomeSucceeded, output: "saved\n"},
		},
		{
			name: "on_failure fallback failed: the item fails with both errors", steps: `[{"handler":"fail","retry_config":{"attempts":1,"on_failure":{"fallback":{"command":"exit 3"}}}}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonAttempts, errorHas: "fallback: exit status 3",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "a fallback that reruns its step runs after each failed run; its last outcome decides", steps: `[{"handler":"fail","retry_config":{"attempts":1,"on_failure":{"fallback":{"command":"echo fixing","max_attempts":3}}}}]`,
			want: want{msg: "ack", result: messages.OutcomeSucceeded, output: "fixing\n"},
			check: func(t *testing.T, f *failureAgent, _ *job) {
				require.Equal(t, 3.0, counter(t, f.reg, "jetfleet_agent_attempts_total", "result", "failure"), "three failed runs")
				require.Equal(t, 4, f.pub.result(t).Attempts, "three failed runs recorded, then the success the fallback made (as without reruns: 1 + 1)")
			},
		},
		{
			name: "a rerun that succeeds: the step succeeds in the same delivery", steps: `[{"handler":"fixable","retry_config":{"attempts":1,"on_failure":{"fallback":{"command":"echo fixing","max_attempts":3}}}}]`,
			setup: func(f *failureAgent) {
				var calls int
				f.a.Handle("fixable", func(context.Context, *Call) (any, error) {
					if calls++; calls == 1 {
						return nil, errBoom
					}
					return "done", nil
				})
			},
			want: want{msg: "ack", result: messages.OutcomeSucceeded, output: "done"},
			check: func(t *testing.T, f *failureAgent, _ *job) {
				require.Equal(t, 2, f.pub.result(t).Attempts, "a failed run and the rerun")
			},
		},
		{
			name: "a failed fallback is followed by another run", steps: `[{"handler":"fail","retry_config":{"attempts":1,"on_failure":{"fallback":{"command":"exit 3","max_attempts":2}}}}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonAttempts, errorHas: "fallback: exit status 3",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"rerun", "give_up"}, attempt: 1},
		},
		{
			name: "handler_failure_fatal: a failed fallback ends the runs and the step's attempts", steps: `[{"handler":"fail","retry_config":{"attempts":3,"on_failure":{"fallback":{"command":"exit 3","max_attempts":3,"handler_failure_fatal":true}}}}]`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonPermanent, errorHas: "boom (handler_failure_fatal: its fallback failed)",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "on_item_failure dlq", steps: oneStep, errorPolicy: `{"on_item_failure":"dlq"}`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonAttempts,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "on_item_failure skip: no dead letter", steps: oneStep, errorPolicy: `{"on_item_failure":"skip"}`,
			want: want{msg: "term", result: messages.OutcomeSkipped, reason: messages.ReasonAttempts,
				final: messages.OutcomeSkipped, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "on_item_failure retry: the whole item again after its backoff", steps: `[{"handler":"ok"},{"handler":"fail","retry_config":{"attempts":1}}]`,
			errorPolicy: `{"on_item_failure":"retry","retry_config":{"max_attempts":3,"initial_delay":"3s"}}`,
			want:        want{msg: "nak 3s", decisions: []string{"item_retry"}, step: 0, retries: 1, itemRun: 2, claims: []int{0}, metric: "item"},
		},
		{
			name: "on_item_failure retry, runs spent: dead-lettered", steps: oneStep,
			errorPolicy: `{"on_item_failure":"retry","retry_config":{"max_attempts":2,"initial_delay":"3s"}}`,
			delivery:    2, before: &wire.ItemState{ItemRun: 2, Retries: 1},
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonItemRetryExhausted,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1, retries: 1, itemRun: 2},
		},
		{
			name: "on_item_failure retry, denied by the budget: dead-lettered", steps: oneStep,
			errorPolicy: `{"on_item_failure":"retry"}`,
			setup: func(f *failureAgent) {
				f.budget.grant = budget.Grant{Deny: &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 1, Limit: 1}}
			},
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonJobBudget,
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1, claims: []int{0},
				events: []string{messages.EventTypeBudgetExhausted}},
		},
		{
			name: "on_item_failure custom ok: failed, no dead letter", steps: oneStep,
			errorPolicy: `{"on_item_failure":{"custom":{"handler":"ok"}}}`,
			want: want{msg: "term", result: messages.OutcomeFailed, reason: messages.ReasonAttempts,
				final: messages.OutcomeFailed, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "on_item_failure custom failed: dead-lettered", steps: oneStep,
			errorPolicy: `{"on_item_failure":{"custom":{"handler":"permanent"}}}`,
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonCustomFailed, errorHas: "on_item_failure custom step:",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "fenced state write: another agent holds the item, this one steps aside", steps: `[{"handler":"fail"}]`,
			delivery: 2, before: &wire.ItemState{StepAttempt: 1, Retries: 1},
			setup: func(f *failureAgent) { f.items.writeErr = jetstream.ErrKeyRevisionMismatch },
			want:  want{msg: "", claims: []int{1}},
		},
		{
			name: "fenced within a third of AckWait: the state came from a lagging replica, delivered again at once", steps: `[{"handler":"fail"}]`,
			delivery: 2, before: &wire.ItemState{StepAttempt: 1, Retries: 1},
			setup: func(f *failureAgent) {
				f.a.ackWait = 30 * time.Second // no other agent can hold a delivery taken a moment ago
				f.items.writeErr = jetstream.ErrKeyRevisionMismatch
			},
			want: want{msg: "nak 200ms", claims: []int{1}},
		},
		{
			name: "fenced give-up: steps aside too", steps: oneStep,
			delivery: 2, before: &wire.ItemState{},
			setup: func(f *failureAgent) { f.items.writeErr = jetstream.ErrKeyRevisionMismatch },
			want:  want{msg: ""},
		},
		{
			name: "retry state unsaved: naked anyway, not counted", steps: `[{"handler":"fail","retry_config":{"initial_delay":"2s"}}]`,
			setup: func(f *failureAgent) { f.items.writeErr = errors.New("kv: timeout") },
			want:  want{msg: "nak 2s", claims: []int{0}},
		},
		{
			name: "give-up unsaved: decided again a second later", steps: oneStep,
			setup: func(f *failureAgent) { f.items.writeErr = errors.New("kv: timeout") },
			want:  want{msg: "nak 1s"},
		},
		{
			name: "DLQ publish failure: kept, a delayed nak growing with the deliveries", steps: oneStep,
			delivery: 3,
			setup:    func(f *failureAgent) { f.dlq.err = errors.New("dlq: stream full") },
			want:     want{msg: "nak 3s", reason: messages.ReasonAttempts, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}, attempt: 1},
		},
		{
			name: "budget read failure: back in a second, nothing recorded", steps: `[{"handler":"fail","retry_config":{"initial_delay":"2s"}}]`,
			setup: func(f *failureAgent) { f.budget.err = errors.New("budget: timeout") },
			want:  want{msg: "nak 1s", claims: []int{0}},
		},
		{
			name: "a redelivery of a given-up item is finalised, not run", steps: `[{"handler":"ok"}]`,
			delivery: 2, before: &wire.ItemState{Final: messages.OutcomeDeadLettered, Reason: messages.ReasonAttempts, Error: "boom",
				History: []messages.Attempt{{Attempt: 1, Decision: "give_up"}}},
			want: want{msg: "term", result: messages.OutcomeDeadLettered, reason: messages.ReasonAttempts, errorHas: "boom",
				dlq: true, final: messages.OutcomeDeadLettered, decisions: []string{"give_up"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFailureAgent(t)
			j := f.job(t, "j1", tc.steps, tc.errorPolicy)
			if tc.before != nil {
				f.store(t, j, *tc.before)
			}
			if tc.setup != nil {
				tc.setup(f)
			}
			n := max(tc.delivery, 1)
			m := f.deliver(t, j, n)
			w := tc.want

			require.Equal(t, w.msg, m.disposition(), "the work message")
			require.Equal(t, w.claims, f.budget.claims, "budget claims")
			require.Equal(t, w.events, f.pub.eventTypes(), "events")
			require.Equal(t, w.dlq, len(f.dlq.entries) > 0, "dead letter")
			res := f.pub.result(t)
			if w.result == "" {
				require.Nil(t, res, "no result")
			} else {
				require.NotNil(t, res, "a result")
				require.Equal(t, w.result, res.Outcome)
				require.Equal(t, w.reason, res.Reason)
				require.Contains(t, res.Error, w.errorHas)
				require.Equal(t, w.output, res.Output)
				require.Equal(t, "j1", res.JobID)
				require.Equal(t, testNames.ResultSubject(messages.DefaultPool, j.id), f.pub.results[0].Subject)
			}
			if w.dlq {
				e := f.dlq.entries[0]
				require.Equal(t, w.reason, e.Reason)
				require.Equal(t, "i1", e.ItemID)
				require.Equal(t, uint64(42), e.StreamSeq)
				require.Equal(t, res.Error, e.Error)
			}
			st := f.state(t, j)
			if w.decisions == nil {
				if tc.before == nil {
					require.Nil(t, st, "no item state stored")
				}
			} else {
				require.NotNil(t, st, "the item state")
				var decisions []string
				for _, h := range st.History {
					decisions = append(decisions, h.Decision)
				}
				require.Equal(t, w.decisions, decisions)
				require.Equal(t, w.final, st.Final)
				require.Equal(t, w.step, st.Step)
				require.Equal(t, w.attempt, st.StepAttempt)
				require.Equal(t, w.retries, st.Retries)
				require.Equal(t, w.itemRun, st.ItemRun)
				if w.final != "" {
					require.Equal(t, w.reason, st.Reason)
				}
			}
			for _, kind := range []string{"retry", "snooze", "item"} {
				want := 0.0
				if kind == w.metric {
					want = 1
				}
				require.Equal(t, want, counter(t, f.reg, "jetfleet_agent_retries_total", "kind", kind), "retries_total{kind=%s}", kind)
			}
			if tc.check != nil {
				tc.check(t, f, j)
			}
		})
	}
}

// TestFailurePathSettlesTheBreaker: a delivery's first failed run counts
// against the job's circuit breaker when it may be the dependency's fault,
// not when the item is to blame (permanent, not retryable) or snoozed.
func TestFailurePathSettlesTheBreaker(t *testing.T) {
	const breaker = `{"circuit_breaker":{"failure_threshold":5}}`
	for _, tc := range []struct {
		steps    string
		failures int
	}{
		{`[{"handler":"fail"}]`, 1},
		{`[{"handler":"fail","retry_config":{"attempts":1}}]`, 1},
		{`[{"handler":"permanent"}]`, 0},
		{`[{"handler":"fail","retry_config":{"retry_on":["rate_limit"]}}]`, 0},
		{`[{"handler":"snooze"}]`, 0},
		{`[{"handler":"ok"}]`, 0},
		// Only the first failed run of a delivery counts.
		{`[{"handler":"permanent","retry_config":{"on_failure":"continue"}},{"handler":"fail"}]`, 0},
	} {
		t.Run(tc.steps, func(t *testing.T) {
			f := newFailureAgent(t)
			j := f.job(t, "j1", tc.steps, breaker)
			f.breakers.m[j.id] = retry.BreakerState{Failures: 2} // closed, two failures counted
			f.deliver(t, j, 1)
			want := 2 + tc.failures
			if tc.steps == `[{"handler":"ok"}]` {
				want = 0 // a success resets the count
			}
			require.Equal(t, want, f.breakers.m[j.id].Failures)
		})
	}
}

// TestRunStepTimesOnTheAgentsClock: the attempt's duration, in the history
// and the metric, is read from the injected clock.
func TestRunStepTimesOnTheAgentsClock(t *testing.T) {
	f := newFailureAgent(t)
	j := f.job(t, "j1", `[{"handler":"slow-fail"}]`, "")
	f.deliver(t, j, 1)
	st := f.state(t, j)
	require.NotNil(t, st)
	require.Equal(t, int64(1500), st.History[0].DurationMS)
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "jetfleet_agent_step_duration_seconds" {
			sum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	require.Equal(t, 1.5, sum)
}

func TestTruncateKeepsTheTailOnARuneBoundary(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello world", 5, "world"},
		{"aé", 1, ""},    // é is 2 bytes: its second alone is no rune
		{"aéb", 2, "b"},  // the last 2 bytes start inside é
		{"aéb", 3, "éb"}, // 3 bytes hold é and b
		{"x日本", 4, "本"},  // 日 and 本 are 3 bytes each
		{"x日本", 6, "日本"},
		{"abc", 0, ""},
		{"abc", -1, ""},
	} {
		got := truncate(tc.s, tc.n)
		require.Equal(t, tc.want, got, "truncate(%q, %d)", tc.s, tc.n)
		require.LessOrEqual(t, len(got), max(tc.n, 0))
		require.True(t, strings.HasSuffix(tc.s, got))
	}
}

// Fakes.

// recMsg is a work message that records what the agent did with it.
type recMsg struct {
	subject string
	data    []byte
	md      jetstream.MsgMetadata

	mu    sync.Mutex
	calls []string
}

func (m *recMsg) record(s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, s)
	return nil
}

// disposition is what the message got, "" when it was left alone.
func (m *recMsg) disposition() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.calls, ", ")
}

func (m *recMsg) Metadata() (*jetstream.MsgMetadata, error) { md := m.md; return &md, nil }
func (m *recMsg) Data() []byte                              { return m.data }
func (m *recMsg) Headers() nats.Header                      { return nil }
func (m *recMsg) Subject() string                           { return m.subject }
func (m *recMsg) Reply() string                             { return "" }
func (m *recMsg) Ack() error                                { return m.record("ack") }
func (m *recMsg) DoubleAck(context.Context) error           { return m.record("ack") }
func (m *recMsg) Nak() error                                { return m.record("nak") }
func (m *recMsg) NakWithDelay(d time.Duration) error        { return m.record("nak " + d.String()) }
func (m *recMsg) InProgress() error                         { return nil }
func (m *recMsg) Term() error                               { return m.record("term") }
func (m *recMsg) TermWithReason(string) error               { return m.record("term") }

// fakeItems is the items bucket: compare-and-set on revisions, and writeErr
// (when set) failing every write.
type fakeItems struct {
	mu       sync.Mutex // the ack loop deletes a batch's states at once
	m        map[string]fakeEntry
	rev      uint64
	writeErr error
	gets     int
}

type fakeEntry struct {
	key   string
	value []byte
	rev   uint64
}

func (e fakeEntry) Bucket() string                  { return "fleet_items" }
func (e fakeEntry) Key() string                     { return e.key }
func (e fakeEntry) Value() []byte                   { return e.value }
func (e fakeEntry) Revision() uint64                { return e.rev }
func (e fakeEntry) Created() time.Time              { return t0 }
func (e fakeEntry) Delta() uint64                   { return 0 }
func (e fakeEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func (s *fakeItems) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	e, ok := s.m[key]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (s *fakeItems) put(key string, value []byte) uint64 {
	s.rev++
	s.m[key] = fakeEntry{key: key, value: append([]byte(nil), value...), rev: s.rev}
	return s.rev
}

func (s *fakeItems) Create(_ context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	if _, ok := s.m[key]; ok {
		return 0, jetstream.ErrKeyExists
	}
	return s.put(key, value), nil
}

func (s *fakeItems) Update(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	if s.m[key].rev != rev {
		return 0, jetstream.ErrKeyRevisionMismatch
	}
	return s.put(key, value), nil
}

// fakeBudget answers every claim with grant (granted when zero) or err.
type fakeBudget struct {
	grant  budget.Grant
	err    error
	claims []int
}

func (b *fakeBudget) Claim(_ context.Context, _ string, itemRetries int) (budget.Grant, error) {
	b.claims = append(b.claims, itemRetries)
	if b.err != nil {
		return budget.Grant{}, b.err
	}
	if b.grant.Deny == nil {
		return budget.Grant{Granted: true}, nil
	}
	return b.grant, nil
}

func (b *fakeBudget) Forget(string) {}
func (b *fakeBudget) Close() error  { return nil }

// fakeDLQ stores entries, or fails with err.
type fakeDLQ struct {
	entries []*messages.DLQEntry
	err     error
}

func (d *fakeDLQ) Write(_ context.Context, e *messages.DLQEntry) error {
	if d.err != nil {
		return d.err
	}
	d.entries = append(d.entries, e)
	return nil
}

// fakePub keeps what is published: every PubAck arrives at once. Parked
// copies' schedules are published synchronously (parkErr refuses them).
type fakePub struct {
	mu      sync.Mutex
	results []*nats.Msg
	events  []*nats.Msg
	parks   []*nats.Msg
	parkErr error
}

func (p *fakePub) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if strings.HasPrefix(m.Subject, "fleet.events.") {
		p.events = append(p.events, m)
	} else {
		p.results = append(p.results, m)
	}
	ok := make(chan *jetstream.PubAck, 1)
	ok <- &jetstream.PubAck{Stream: "FLEET_RESULTS"}
	return fakeFuture{msg: m, ok: ok}, nil
}

func (p *fakePub) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if !strings.HasPrefix(m.Subject, "fleet.parked.") {
		return nil, fmt.Errorf("unexpected synchronous publish to %s", m.Subject)
	}
	if p.parkErr != nil {
		return nil, p.parkErr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parks = append(p.parks, m)
	return &jetstream.PubAck{Stream: "FLEET_PARK"}, nil
}

// result is the one result published, nil if none.
func (p *fakePub) result(t *testing.T) *messages.Result {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.LessOrEqual(t, len(p.results), 1, "at most one result per delivery")
	if len(p.results) == 0 {
		return nil
	}
	var r messages.Result
	require.NoError(t, json.Unmarshal(p.results[0].Data, &r))
	return &r
}

func (p *fakePub) eventTypes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.events {
		out = append(out, m.Header.Get(messages.HeaderEventType))
	}
	return out
}

type fakeFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
}

func (f fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f fakeFuture) Err() <-chan error            { return nil }
func (f fakeFuture) Msg() *nats.Msg               { return f.msg }

// fakeBreakers keeps the jobs' breaker states in a map.
type fakeBreakers struct {
	clk *clock.Manual
	m   map[string]retry.BreakerState
}

func (b *fakeBreakers) update(_ context.Context, job string, fn func(time.Time, retry.BreakerState) retry.BreakerState) (from, to retry.BreakerState, err error) {
	from = b.m[job]
	to = fn(b.clk.Now(), from)
	b.m[job] = to
	return from, to, nil
}

func (b *fakeBreakers) forget(job string) { delete(b.m, job) }
func (b *fakeBreakers) close()            {}
