package itemrun

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// encoded is result i of job, as report encodes it.
func encoded(t *testing.T, job string, i int) pendingResult {
	t.Helper()
	data, err := wire.EncodeResult(&messages.Result{JobID: job, ItemID: fmt.Sprintf("i%d", i), Index: int64(i), Outcome: messages.OutcomeSucceeded}, 1<<20)
	require.NoError(t, err)
	return pendingResult{subject: "fleet.results.default." + job, data: data, ack: ackTarget{msg: &recMsg{}}}
}

// indexes decodes a batch's message and returns the items' indexes.
func indexes(t *testing.T, b *resultBatch) []int64 {
	t.Helper()
	rs, err := wire.DecodeResults(b.msg.Payload(), nil)
	require.NoError(t, err)
	require.Len(t, b.targets, len(rs), "one work message per result")
	var out []int64
	for _, r := range rs {
		out = append(out, r.Index)
	}
	return out
}

func TestResultBatchesFlushOnCount(t *testing.T) {
	bs := newResultBatches(3, 1<<20, 5*time.Millisecond)
	require.Empty(t, bs.add(encoded(t, "j", 0), t0))
	require.Empty(t, bs.add(encoded(t, "j", 1), t0))
	ready := bs.add(encoded(t, "j", 2), t0)
	require.Len(t, ready, 1)
	require.Equal(t, []int64{0, 1, 2}, indexes(t, ready[0]))
	require.Empty(t, bs.all(), "nothing left open")
}

func TestResultBatchesFlushOnLinger(t *testing.T) {
	bs := newResultBatches(100, 1<<20, 5*time.Millisecond)
	require.Empty(t, bs.add(encoded(t, "j", 0), t0))
	require.Empty(t, bs.add(encoded(t, "j", 1), t0.Add(4*time.Millisecond)))
	ready, next := bs.due(t0.Add(4 * time.Millisecond))
	require.Empty(t, ready, "the first result has waited 4ms of 5")
	require.Equal(t, t0.Add(5*time.Millisecond), next, "due 5ms after its first result")
	ready, next = bs.due(t0.Add(5 * time.Millisecond))
	require.Len(t, ready, 1)
	require.True(t, next.IsZero(), "none open")
	require.Equal(t, []int64{0, 1}, indexes(t, ready[0]))
}

func TestResultBatchesKeepJobsApart(t *testing.T) {
	bs := newResultBatches(2, 1<<20, 5*time.Millisecond)
	require.Empty(t, bs.add(encoded(t, "a", 0), t0))
	require.Empty(t, bs.add(encoded(t, "b", 0), t0.Add(time.Millisecond)))
	ready := bs.add(encoded(t, "a", 1), t0.Add(2*time.Millisecond))
	require.Len(t, ready, 1)
	require.Equal(t, "fleet.results.default.a", ready[0].subject)
	ready, next := bs.due(t0.Add(2 * time.Millisecond))
	require.Empty(t, ready)
	require.Equal(t, t0.Add(6*time.Millisecond), next, "b's linger runs from its own first result")
	ready = bs.all()
	require.Len(t, ready, 1)
	require.Equal(t, "fleet.results.default.b", ready[0].subject)
}

// A batch never grows over max_payload: a result that would not fit goes
// into the next message, and each message still decodes whole.
func TestResultBatchesSplitAtMaxBytes(t *testing.T) {
	one := encoded(t, "j", 0)
	limit := 3*len(one.data) + 4 // "[" + three results + two commas + "]" at most
	bs := newResultBatches(100, limit, time.Second)
	var ready []*resultBatch
	for i := range 7 {
		ready = append(ready, bs.add(encoded(t, "j", i), t0)...)
	}
	ready = append(ready, bs.all()...)
	var all []int64
	for _, b := range ready {
		require.LessOrEqual(t, len(b.msg.Payload()), limit)
		all = append(all, indexes(t, b)...)
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6}, all)
	require.Len(t, ready, 3)
}

// A lone result is sent as the object itself, as before batches.
func TestResultBatchOfOneIsAPlainResult(t *testing.T) {
	bs := newResultBatches(1, 1<<20, time.Second)
	ready := bs.add(encoded(t, "j", 4), t0)
	require.Len(t, ready, 1)
	var r messages.Result
	require.NoError(t, json.Unmarshal(ready[0].msg.Payload(), &r))
	require.EqualValues(t, 4, r.Index)
}

// The batcher publishes a job's results together and the ack loop acks
// every work message once that message's PubAck is in, never before.
func TestBatchLoopAcksAfterThePubAck(t *testing.T) {
	f := newFailureAgent(t)
	f.a.cfg.ResultBatch, f.a.cfg.ResultLinger = 3, time.Hour
	f.a.results = make(chan pendingResult, 16)
	f.a.acks = make(chan pendingAck, 16)
	var msgs []*recMsg
	for i := range 5 {
		r := encoded(t, "j", i)
		m := &recMsg{}
		r.ack.msg = m
		msgs = append(msgs, m)
		f.a.results <- r
	}
	close(f.a.results)
	f.a.batchLoop()
	require.Len(t, f.pub.results, 2, "3 results in one message, the last 2 in another")
	for _, m := range msgs {
		require.Empty(t, m.disposition(), "not acked before the PubAck is awaited")
	}
	f.a.ackLoop()
	for _, m := range msgs {
		require.Equal(t, "ack", m.disposition())
	}
}
