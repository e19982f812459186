package dlq_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// manualNow is a clock moved by the test.
type manualNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualNow) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualNow) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A work message that exhausted MaxDeliver while its MAX_DELIVERIES
// advisory was lost (no advisories stream to capture it, no mover
// listening) is found by the sweep, and dead-lettered on the second pass
// at least the minimum age after the first; a message parked on a long
// NakWithDelay and one never delivered are left alone. A late advisory
// (Move again) adds no second entry.
func TestSweepDeadLettersStrandedMessages(t *testing.T) {
	// MaxAckPending 1: i0 holds the pool until the server gives up on it.
	prov := provision.Config{MaxDeliver: 2, AckWait: time.Second, MaxAckPending: 1}
	f := newFleet(t, prov)
	ctx := testCtx(t, 60*time.Second)
	// Lose every advisory: nothing captures them.
	require.NoError(t, f.js.DeleteStream(ctx, names.AdvisoriesStream()))
	cons, err := provision.EnsurePool(ctx, f.js, names, "default", prov)
	require.NoError(t, err)

	var seqs []uint64
	publish := func(i int) {
		t.Helper()
		wi := wire.WorkItem{JobID: "sw", ItemID: fmt.Sprintf("i%d", i), Index: int64(i), Payload: json.RawMessage(`{}`)}
		data, err := json.Marshal(&wi)
		require.NoError(t, err)
		ack, err := f.js.Publish(ctx, names.WorkSubject("default", "sw"), data)
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	fetch := func(wait time.Duration) jetstream.Msg {
		t.Helper()
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		require.NoError(t, err)
		var got jetstream.Msg
		for m := range b.Messages() {
			got = m
		}
		return got
	}
	deliveredSeq := func(m jetstream.Msg) uint64 {
		t.Helper()
		require.NotNil(t, m)
		md, err := m.Metadata()
		require.NoError(t, err)
		return md.Sequence.Stream
	}
	// i0: delivered MaxDeliver times, never acked (an agent that died on
	// each). The server gives up on it at the next pull after the second
	// AckWait, and its advisory goes nowhere.
	publish(0)
	require.Equal(t, seqs[0], deliveredSeq(fetch(5*time.Second)))
	require.Equal(t, seqs[0], deliveredSeq(fetch(5*time.Second)), "redelivered after AckWait")
	natstest.WaitFor(t, 20*time.Second, func() error {
		if m := fetch(200 * time.Millisecond); m != nil {
			return fmt.Errorf("delivered %d again", deliveredSeq(m))
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumAckPending > 0 {
			return fmt.Errorf("still pending: %d", ci.NumAckPending)
		}
		return nil
	})
	items, err := f.js.KeyValue(ctx, names.ItemsBucket())
	require.NoError(t, err)
	mover := dlq.NewMover(f.js, names, items, zerolog.Nop())
	clk := &manualNow{t: time.Now()}
	sw, err := dlq.NewSweeper(mover, dlq.WithSweepMinAge(time.Minute), dlq.WithSweepClock(clk.now))
	require.NoError(t, err)

	// First sighting: nothing moved yet, nor a minute-less later look.
	n, err := sw.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	clk.advance(30 * time.Second)
	n, err = sw.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// Seen again a minute after the first sighting: moved.
	clk.advance(31 * time.Second)
	n, err = sw.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	work, err := f.js.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	_, err = work.GetMsg(ctx, seqs[0])
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "deleted from the work stream")
	insp := dlq.NewInspector(f.js, names)
	page, err := insp.List(ctx, messages.DLQFilter{JobID: "sw"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "i0", page.Entries[0].Entry.ItemID)
	require.Equal(t, messages.ReasonMaxDeliveries, page.Entries[0].Entry.Reason)
	results, err := f.js.Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	last, err := results.GetLastMsgForSubject(ctx, names.ResultSubject(messages.CoordinatorOrigin, "sw"))
	require.NoError(t, err)
	var res messages.Result
	require.NoError(t, json.Unmarshal(last.Data, &res))
	require.Equal(t, messages.OutcomeDeadLettered, res.Outcome)
	require.Equal(t, "i0", res.ItemID)

	// The advisory arrives late after all: no second entry.
	require.NoError(t, mover.Move(ctx, seqs[0], 2))
	page, err = insp.List(ctx, messages.DLQFilter{JobID: "sw"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)

	// i1: parked for an hour; i2: never delivered (MaxAckPending 1).
	publish(1)
	m := fetch(5 * time.Second)
	require.Equal(t, seqs[1], deliveredSeq(m))
	require.NoError(t, m.NakWithDelay(time.Hour))
	publish(2)
	for range 3 {
		clk.advance(time.Hour)
		n, err = sw.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a parked and an undelivered message stay")
	}
	for _, seq := range seqs[1:] {
		_, err = work.GetMsg(ctx, seq)
		require.NoError(t, err)
	}
}
