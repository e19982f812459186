package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// limiterFunc is a Limiter that runs a function (no waiting).
type limiterFunc func() error

func (f limiterFunc) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f()
}

func TestReplayRepublishesAndRemoves(t *testing.T) {
	f := newFleet(t, provision.Config{})
	seed(t, f)
	// An item already replayed once, with a long history.
	e := entry("a", 20, "network", "connection refused")
	e.Generation, e.ReplayCount = 1, 1
	for i := range 150 {
		e.Attempts = append(e.Attempts, messages.Attempt{Attempt: i + 3, Message: fmt.Sprintf("attempt %d", i+3)})
	}
	f.write(t, e)
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names)
	type reopen struct {
		job string
		gen int
		seq uint64
	}
	var mu sync.Mutex
	var reopens []reopen
	rep := dlq.NewReplayer(f.js, names, in, dlq.WithReopen(func(_ context.Context, e *messages.DLQEntry, gen int, seq uint64) error {
		mu.Lock()
		reopens = append(reopens, reopen{e.JobID, gen, seq})
		mu.Unlock()
		return nil
	}))
	var last dlq.Progress
	prog, err := rep.Replay(ctx, dlq.ReplayOptions{
		Filter: messages.DLQFilter{JobID: "a", ErrorClass: "network"}, ResetAttempts: true,
		OnProgress: func(p dlq.Progress) { last = p },
	})
	require.NoError(t, err)
	require.Equal(t, dlq.Progress{Replayed: 7}, prog)
	require.Equal(t, prog, last)

	work := f.workItems(t)
	require.Len(t, work, 7)
	byItem := map[string]workMsg{}
	for _, w := range work {
		byItem[w.item.ItemID] = w
	}
	w := byItem["item-003"]
	require.Equal(t, names.WorkSubject("default", "a"), w.subject, "back to the original subject")
	require.Equal(t, wire.WorkMsgID("a", "item-003", 1), w.msgID, "a fresh msg id: the next generation's")
	require.Equal(t, 1, w.item.Generation)
	require.Equal(t, 1, w.item.ReplayCount)
	require.Equal(t, "a:3", w.item.CorrelationID, "the correlation id is kept")
	require.JSONEq(t, `{"id":"item-003","n":3}`, string(w.item.Payload))
	require.Len(t, w.item.History, 2, "the history travels with the item")
	require.True(t, w.item.ResetAttempts)
	w = byItem["item-020"]
	require.Equal(t, 2, w.item.Generation)
	require.Equal(t, 2, w.item.ReplayCount)
	require.Len(t, w.item.History, dlq.MaxHistory, "history bounded, newest kept")
	require.Equal(t, "attempt 152", w.item.History[dlq.MaxHistory-1].Message)

	// One reopen marker per item, before its republish, with the new generation.
	markers := f.results(t)
	require.Len(t, markers, 7)
	for _, m := range markers {
		require.Equal(t, messages.OutcomeReopened, m.Outcome)
		require.Equal(t, byItem[m.ItemID].item.Generation, m.Generation)
	}
	require.Len(t, reopens, 7)
	for _, r := range reopens {
		require.Equal(t, "a", r.job)
		require.NotZero(t, r.seq)
	}

	// Replayed entries are gone; the others stay.
	st, err := in.Stats(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 2, "b": 4}, st.ByJob)
	require.Equal(t, map[string]int64{"timeout": 2, "error": 4}, st.ByErrorClass)
}

func TestReplayBySignatureAndDryRun(t *testing.T) {
	f := newFleet(t, provision.Config{})
	seed(t, f)
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names)
	rep := dlq.NewReplayer(f.js, names, in)

	plan, err := rep.Plan(ctx, messages.DLQFilter{Signature: sigOf("deadline exceeded")})
	require.NoError(t, err)
	// Read once the DLQ stream has sourced the pool's entries (a scan
	// waits for that).
	before := f.streamInfo(t, names.DLQStream()).State
	require.EqualValues(t, 2, plan.Matched)
	require.Equal(t, map[string]int64{"a": 2}, plan.ByJob)
	require.Equal(t, map[string]int64{"timeout": 2}, plan.ByErrorClass)
	require.Equal(t, map[string]int64{sigOf("deadline exceeded"): 2}, plan.BySignature)
	plan, err = rep.Plan(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 12, plan.Matched)
	require.Equal(t, map[string]int64{"a": 8, "b": 4}, plan.ByJob)
	after := f.streamInfo(t, names.DLQStream()).State
	before.Consumers, after.Consumers = 0, 0
	require.Equal(t, before, after, "a dry run changes nothing")
	require.Empty(t, f.workItems(t))
	require.Empty(t, f.results(t))

	prog, err := rep.Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{Signature: sigOf("deadline exceeded")}})
	require.NoError(t, err)
	require.EqualValues(t, 2, prog.Replayed)
	var ids []string
	for _, w := range f.workItems(t) {
		ids = append(ids, w.item.ItemID)
	}
	slices.Sort(ids)
	require.Equal(t, []string{"item-006", "item-007"}, ids, "exactly the entries with that signature")
}

// Cancelled after k entries (by the limiter, deterministically) and run
// again, a replay republishes every entry exactly once.
func TestReplayInterruptedAndResumed(t *testing.T) {
	f := newFleet(t, provision.Config{})
	const n, k = 40, 13
	for i := range n {
		f.write(t, entry("big", i, "network", "connection refused"))
	}
	in := dlq.NewInspector(f.js, names)
	rep := dlq.NewReplayer(f.js, names, in, dlq.WithConcurrency(4))

	ctx, cancel := context.WithCancel(testCtx(t, 30*time.Second))
	waits := 0
	prog, err := rep.Replay(ctx, dlq.ReplayOptions{
		Filter: messages.DLQFilter{JobID: "big"},
		Limiter: limiterFunc(func() error {
			if waits++; waits > k {
				cancel() // Ctrl-C while waiting for the next slot
				return context.Canceled
			}
			return nil
		}),
	})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, k, prog.Replayed, "exactly the entries started before the cancel")
	page, err := in.List(testCtx(t, 10*time.Second), messages.DLQFilter{JobID: "big"})
	require.NoError(t, err)
	require.Len(t, page.Entries, n-k, "the count matches what left the DLQ")
	require.Len(t, f.workItems(t), k)

	prog, err = rep.Replay(testCtx(t, 30*time.Second), dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "big"}})
	require.NoError(t, err)
	require.EqualValues(t, n-k, prog.Replayed)
	perItem := map[string]int{}
	for _, w := range f.workItems(t) {
		perItem[w.item.ItemID]++
	}
	require.Len(t, perItem, n)
	for id, c := range perItem {
		require.Equal(t, 1, c, "%s republished once", id)
	}
}

// A replay that died after republishing but before deleting the entry is
// finished by the next one without a second work message (same msg id,
// inside the work stream's duplicate window) or a second marker.
func TestReplayResumesACrashedEntryWithoutDuplicates(t *testing.T) {
	f := newFleet(t, provision.Config{})
	e := entry("c", 1, "error", "x")
	f.write(t, e)
	in := dlq.NewInspector(f.js, names)
	crashed := errors.New("crash")
	// First run: the reopen hook "crashes" the replay after the marker, twice
	// (a marker with no republish), then a run where the republish went out but
	// the delete was lost: simulated by publishing the work message by hand.
	rep := dlq.NewReplayer(f.js, names, in, dlq.WithReopen(func(context.Context, *messages.DLQEntry, int, uint64) error {
		return fmt.Errorf("%w: %w", dlq.ErrNotReplayable, crashed)
	}))
	ctx := testCtx(t, 30*time.Second)
	prog, err := rep.Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "c"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, prog.Failed)
	require.Contains(t, prog.LastError, "crash")
	require.Len(t, f.results(t), 1, "the marker was written")
	require.Empty(t, f.workItems(t))

	data := `{"job_id":"c","item_id":"item-001","index":1,"payload":{},"generation":1,"correlation_id":"c:1"}`
	_, err = f.js.Publish(ctx, names.WorkSubject("default", "c"), []byte(data), jetstreamMsgID(wire.WorkMsgID("c", "item-001", 1)))
	require.NoError(t, err)

	prog, err = dlq.NewReplayer(f.js, names, in).Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "c"}})
	require.NoError(t, err)
	require.Equal(t, dlq.Progress{Replayed: 1}, prog)
	require.Len(t, f.workItems(t), 1, "the republish was a duplicate")
	require.Len(t, f.results(t), 1, "so was the marker")
	page, err := in.List(ctx, messages.DLQFilter{JobID: "c"})
	require.NoError(t, err)
	require.Empty(t, page.Entries)
}

func TestReplaySkipsPoison(t *testing.T) {
	f := newFleet(t, provision.Config{})
	p := entry("p", 1, "error", "undecodable work message")
	p.Reason = messages.ReasonPoison
	f.write(t, p, entry("p", 2, "error", "x"))
	in := dlq.NewInspector(f.js, names)
	rep := dlq.NewReplayer(f.js, names, in)
	ctx := testCtx(t, 30*time.Second)
	plan, err := rep.Plan(ctx, messages.DLQFilter{JobID: "p"})
	require.NoError(t, err)
	require.EqualValues(t, 1, plan.Matched)
	require.EqualValues(t, 1, plan.Skipped)
	prog, err := rep.Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "p"}})
	require.NoError(t, err)
	require.Equal(t, dlq.Progress{Replayed: 1, Skipped: 1}, prog)
	page, err := in.List(ctx, messages.DLQFilter{JobID: "p"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1, "the poison entry stays for an operator to look at")
}

// Paced replays wait on the injected clock: 10 entries at 4/s take 2.25s
// of fake time and no real sleeping.
func TestReplayPacedOnAFakeClock(t *testing.T) {
	f := newFleet(t, provision.Config{})
	for i := range 10 {
		f.write(t, entry("r", i, "error", "x"))
	}
	clk := newFakeClock()
	start := clk.Now()
	lim, err := dlq.LimiterFor(4, clk)
	require.NoError(t, err)
	rep := dlq.NewReplayer(f.js, names, dlq.NewInspector(f.js, names), dlq.WithClock(clk))
	prog, err := rep.Replay(testCtx(t, 30*time.Second), dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "r"}, Limiter: lim})
	require.NoError(t, err)
	require.EqualValues(t, 10, prog.Replayed)
	require.Equal(t, 9*250*time.Millisecond, clk.elapsed(start))
}

// A replay into a pool that has no work consumer fails the entry with the
// reason, and leaves it in the DLQ: its item would wait in the work stream
// with no agent to take it.
func TestReplayIntoAPoolWithoutConsumerFails(t *testing.T) {
	f := newFleet(t, provision.Config{})
	e := entry("lost", 1, "network", "connection refused")
	e.Pool, e.Subject = "nobody", names.WorkSubject("nobody", "lost")
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, dlq.NewWriter(f.js, names, "nobody").Write(ctx, e)) // an agent of pool nobody wrote it
	in := dlq.NewInspector(f.js, names)
	r := dlq.NewReplayer(f.js, names, in, dlq.WithReopen(func(context.Context, *messages.DLQEntry, int, uint64) error { return nil }))
	prog, err := r.Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "lost"}})
	require.NoError(t, err)
	require.Equal(t, int64(0), prog.Replayed)
	require.Equal(t, int64(1), prog.Failed)
	require.Contains(t, prog.LastError, `pool "nobody" has no work consumer (agents-nobody)`)
	page, err := in.List(ctx, messages.DLQFilter{JobID: "lost"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1, "the entry stays in the DLQ")
	s, err := f.js.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	require.Equal(t, uint64(0), s.CachedInfo().State.Msgs, "nothing stranded in the work stream")
}
