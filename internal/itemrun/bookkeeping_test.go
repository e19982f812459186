package itemrun

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// slotBudget is a fakeBudget that records, at each claim, whether the
// worker's slot had been given back already.
type slotBudget struct {
	fakeBudget
	freed     *bool
	freedSeen []bool
}

func (b *slotBudget) Claim(ctx context.Context, job string, itemRetries int) (budget.Grant, error) {
	b.freedSeen = append(b.freedSeen, *b.freed)
	return b.fakeBudget.Claim(ctx, job, itemRetries)
}

// processFreeing runs delivery n of item i1 of j through process with a
// slot whose release it records, then the batcher and the ack loop.
func processFreeing(t *testing.T, f *failureAgent, j *job, n uint64, freed *bool) *recMsg {
	t.Helper()
	data, err := json.Marshal(wire.WorkItem{JobID: j.id, ItemID: "i1", Index: 7, Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	m := &recMsg{subject: testNames.WorkSubject(messages.DefaultPool, j.id), data: data,
		md: jetstream.MsgMetadata{NumDelivered: n, Sequence: jetstream.SequencePair{Stream: 42}}}
	f.a.results = make(chan pendingResult, 16)
	f.a.acks = make(chan pendingAck, 16)
	*freed = false
	calls := 0
	f.a.safeProcessOn(context.Background(), m, &hbSlot{}, func() { calls++; *freed = true })
	require.LessOrEqual(t, calls, 1, "the slot was given back twice")
	close(f.a.results)
	f.a.batchLoop()
	f.a.ackLoop()
	return m
}

// A worker gives its slot back when a failed run ends what the delivery
// can run of the item: before the budget claim, state write and delayed
// nak of a retry; not before a next step runs, nor for a success (whose
// bookkeeping is handing its result over).
func TestTheSlotIsFreeForTheBookkeeping(t *testing.T) {
	f := newFailureAgent(t)
	var freed bool
	sb := &slotBudget{freed: &freed}
	f.a.budget = sb

	retried := f.job(t, "j1", `[{"handler": "fail", "retry_config": {"attempts": 3}}]`, "")
	m := processFreeing(t, f, retried, 1, &freed)
	require.True(t, freed)
	require.Equal(t, []bool{true}, sb.freedSeen, "the claim ran holding the slot")
	require.Contains(t, m.disposition(), "nak ")

	ok := f.job(t, "j2", `[{"handler": "ok"}]`, "")
	m = processFreeing(t, f, ok, 1, &freed)
	require.False(t, freed)
	require.Equal(t, "ack", m.disposition())

	// A step that fails with on_failure: continue is followed by a run:
	// the slot stays held through it.
	var heldAtNext []bool
	f.a.Handle("probe", func(context.Context, *Call) (any, error) {
		heldAtNext = append(heldAtNext, !freed)
		return nil, nil
	})
	cont := f.job(t, "j3", `[{"handler": "fail", "retry_config": {"attempts": 1, "on_failure": "continue"}}, {"handler": "probe"}]`, "")
	m = processFreeing(t, f, cont, 1, &freed)
	require.Equal(t, []bool{true}, heldAtNext, "the next step ran without the slot")
	require.False(t, freed)
	require.Equal(t, "ack", m.disposition())
}

// The redelivery that follows a retry's delayed nak uses the state the
// agent wrote, without reading the bucket, when it is the next delivery of
// the same message; any other delivery reads it.
func TestRedeliveryUsesTheStateItWrote(t *testing.T) {
	f := newFailureAgent(t)
	f.a.states = newStateCache(8)
	j := f.job(t, "j1", `[{"handler": "fail", "retry_config": {"attempts": 5}}]`, "")

	f.deliver(t, j, 1)
	st := f.state(t, j)
	require.Equal(t, 1, st.StepAttempt)
	f.deliver(t, j, 2)
	require.Zero(t, f.items.gets, "the redelivery read the state it had written")
	require.Equal(t, 2, f.state(t, j).StepAttempt, "the redelivery did not continue from the state")

	// Delivery 4 after 2: another delivery came between, maybe to another
	// agent, whose write this agent has not seen.
	f.deliver(t, j, 4)
	require.Equal(t, 1, f.items.gets)
	require.Equal(t, 3, f.state(t, j).StepAttempt)
}

func TestStateCacheEvictsTheOldest(t *testing.T) {
	c := newStateCache(2)
	for seq := uint64(1); seq <= 3; seq++ {
		c.put(seq, cachedState{key: "k", rev: seq, delivered: 1})
	}
	_, ok := c.take(1, "k", 2)
	require.False(t, ok, "the oldest stays beyond the cache's size")
	e, ok := c.take(3, "k", 2)
	require.True(t, ok)
	require.EqualValues(t, 3, e.rev)
	_, ok = c.take(3, "k", 2)
	require.False(t, ok, "taken twice")
	_, ok = c.take(2, "other", 2)
	require.False(t, ok, "another item's key")
	c.put(4, cachedState{key: "k", delivered: 1})
	_, ok = c.take(4, "k", 3)
	require.False(t, ok, "not the next delivery")
}
