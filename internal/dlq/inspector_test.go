package dlq_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// seed writes 12 entries: job a items 0-5 network, 6-7 timeout; job b
// items 0-3 "disk full" (class error, reason permanent).
func seed(t *testing.T, f *fleet) {
	t.Helper()
	for i := range 8 {
		class, msg := "network", "connection refused"
		if i >= 6 {
			class, msg = "timeout", "deadline exceeded"
		}
		f.write(t, entry("a", i, class, msg))
	}
	for i := range 4 {
		e := entry("b", i, "error", "disk full")
		e.Reason = messages.ReasonPermanent
		f.write(t, e)
	}
}

// A scan reads up to the last entry the stream's leader held when it began,
// even when its ordered consumer sits on a replica that lags the leader
// and says nothing is pending before then: a list would otherwise miss
// entries, and a purge leave them.
func TestInspectorScanReadsPastALaggingReplica(t *testing.T) {
	f := newFleet(t, provision.Config{})
	seed(t, f)
	ctx := testCtx(t, 30*time.Second)
	lag := natstest.NewLaggingReplica(5)
	in := dlq.NewInspector(lag.JetStream(f.js, names.DLQStream()), names)
	type listed struct {
		page *dlq.Page
		err  error
	}
	done := make(chan listed, 1)
	go func() {
		page, err := in.List(ctx, messages.DLQFilter{})
		done <- listed{page, err}
	}()
	select {
	case <-lag.Asked():
	case l := <-done:
		t.Fatalf("the scan ended (%v) without reading past the lagging replica", l.err)
	}
	lag.CatchUp()
	l := <-done
	require.NoError(t, l.err)
	require.Len(t, l.page.Entries, 12, "every entry, not only the 5 the replica held")
	require.False(t, l.page.More)
}

// A scan whose ordered consumer sits on a replica that applies nothing (a
// node whose store is full: it holds the first 5 entries and never more,
// says nothing is pending and stays alive) reads on with a new consumer
// once nothing came for its idle wait while the leader holds more: it used
// to wait on the stale one until the request's deadline, and dlq.list
// timed out.
func TestInspectorScanLeavesAReplicaThatAppliesNothing(t *testing.T) {
	f := newFleet(t, provision.Config{})
	seed(t, f)
	ctx := testCtx(t, 30*time.Second)
	stale := natstest.NewStaleReplica("n2", 5, 1)
	in := dlq.NewInspector(stale.JetStream(f.js, names.DLQStream()), names, dlq.WithIdleWait(100*time.Millisecond))
	page, err := in.List(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 12, "every entry, not only the 5 the stale replica held")
	for i, e := range page.Entries {
		require.EqualValues(t, i+1, e.Seq, "each entry once, in order")
	}
	require.False(t, page.More)
	require.Equal(t, 2, stale.Made(), "the stale one, and one made again elsewhere")
}

func TestInspectorListGetAndPaging(t *testing.T) {
	f := newFleet(t, provision.Config{})
	seed(t, f)
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names)

	page, err := in.List(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 12)
	require.False(t, page.More)
	for i := 1; i < len(page.Entries); i++ {
		require.Greater(t, page.Entries[i].Seq, page.Entries[i-1].Seq, "stream order")
	}

	page, err = in.List(ctx, messages.DLQFilter{JobID: "a", ErrorClass: "network"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 6)
	e := page.Entries[0].Entry
	require.Equal(t, "item-000", e.ItemID)
	require.Len(t, e.Attempts, 2, "the full attempt history is kept")
	require.Equal(t, "a:0", e.CorrelationID)

	// Pages of 5 over job a's 8 entries: 5 + 3.
	p1, err := in.List(ctx, messages.DLQFilter{JobID: "a", Limit: 5})
	require.NoError(t, err)
	require.Len(t, p1.Entries, 5)
	require.True(t, p1.More)
	require.Equal(t, p1.Entries[4].Seq, p1.NextSeq)
	p2, err := in.List(ctx, messages.DLQFilter{JobID: "a", Limit: 5, AfterSeq: p1.NextSeq})
	require.NoError(t, err)
	require.Len(t, p2.Entries, 3)
	require.False(t, p2.More)
	require.Equal(t, "item-005", p2.Entries[0].Entry.ItemID)

	// A page bounded in bytes still returns at least one entry.
	small := dlq.NewInspector(f.js, names, dlq.WithPageBytes(1500))
	p, err := small.List(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.NotEmpty(t, p.Entries)
	require.Less(t, len(p.Entries), 12)
	require.True(t, p.More)
	b, _ := json.Marshal(p.Entries)
	require.LessOrEqual(t, len(b), 1500)

	got, err := in.Get(ctx, page.Entries[0].Seq)
	require.NoError(t, err)
	require.Equal(t, page.Entries[0], *got)
	_, err = in.Get(ctx, 9999)
	require.ErrorIs(t, err, dlq.ErrEntryNotFound)

	// Filters that match nothing return an empty page, not an error.
	none, err := in.List(ctx, messages.DLQFilter{JobID: "nope"})
	require.NoError(t, err)
	require.Empty(t, none.Entries)
	_, err = in.List(ctx, messages.DLQFilter{JobID: "not.a.token"})
	require.ErrorIs(t, err, dlq.ErrBadFilter)
}

func TestInspectorTimeRangeAndText(t *testing.T) {
	f := newFleet(t, provision.Config{})
	now := time.Now().UTC()
	for i := range 6 {
		e := entry("t", i, "error", "boom")
		e.DeadLetteredAt = now.Add(time.Duration(i-6) * time.Minute) // 6 to 1 minutes ago
		if i == 4 {
			e.Attempts[1].Message = "needle in an attempt"
		}
		f.write(t, e)
	}
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names)
	page, err := in.List(ctx, messages.DLQFilter{Since: now.Add(-4 * time.Minute), Until: now.Add(-2 * time.Minute)})
	require.NoError(t, err)
	var ids []string
	for _, r := range page.Entries {
		ids = append(ids, r.Entry.ItemID)
	}
	require.Equal(t, []string{"item-002", "item-003"}, ids, "since inclusive, until exclusive")

	page, err = in.List(ctx, messages.DLQFilter{Text: "NEEDLE"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "item-004", page.Entries[0].Entry.ItemID)
}

// TestInspectorListScanLimit: a page examines at most the scan limit,
// however rare its filter's matches; following next_seq finds every match
// exactly once.
func TestInspectorListScanLimit(t *testing.T) {
	f := newFleet(t, provision.Config{})
	for i := range 40 {
		msg := "boom"
		if i == 3 || i == 25 || i == 39 {
			msg = "rare needle"
		}
		f.write(t, entry("s", i, "error", msg))
	}
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names, dlq.WithScanLimit(10))

	filter := messages.DLQFilter{Text: "needle", Limit: 100}
	var found []string
	pages := 0
	for {
		p, err := in.List(ctx, filter)
		require.NoError(t, err)
		require.LessOrEqual(t, p.Examined, 10)
		pages++
		for _, r := range p.Entries {
			found = append(found, r.Entry.ItemID)
		}
		if !p.More {
			break
		}
		require.Greater(t, p.NextSeq, filter.AfterSeq, "paging moves on")
		filter.AfterSeq = p.NextSeq
	}
	require.Equal(t, []string{"item-003", "item-025", "item-039"}, found)
	require.Equal(t, 4, pages, "40 entries, 10 examined a page")

	// The second page (entries 10-19) holds no match: empty, with more.
	p, err := in.List(ctx, messages.DLQFilter{Text: "needle", AfterSeq: 10})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
	require.True(t, p.More)
	require.EqualValues(t, 20, p.NextSeq)

	// Full pages are unchanged by the limit.
	p, err = in.List(ctx, messages.DLQFilter{Limit: 5})
	require.NoError(t, err)
	require.Len(t, p.Entries, 5)
	require.True(t, p.More)
	require.Equal(t, p.Entries[4].Seq, p.NextSeq)
}

func TestInspectorStatsExportPurge(t *testing.T) {
	f := newFleet(t, provision.Config{DLQMaxMsgs: 100})
	seed(t, f)
	// Something that is not an entry can be seen and purged, not replayed.
	_, err := f.js.Publish(testCtx(t, 5*time.Second), names.DLQSubject("default", "b"), []byte("garbage"))
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)
	in := dlq.NewInspector(f.js, names)

	st, err := in.Stats(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 13, st.Total)
	require.Equal(t, map[string]int64{"a": 8, "b": 5}, st.ByJob)
	require.Equal(t, map[string]int64{messages.ReasonAttempts: 8, messages.ReasonPermanent: 4, dlq.ReasonUndecodable: 1}, st.ByReason)
	require.Equal(t, map[string]int64{"network": 6, "timeout": 2, "error": 5}, st.ByErrorClass)
	require.EqualValues(t, 6, st.BySignature[sigOf("connection refused")])
	require.Equal(t, "exit status 3: disk full", st.Examples[sigOf("disk full")])
	require.Positive(t, st.OldestAgeMS)
	require.Positive(t, st.Bytes)
	require.EqualValues(t, 13, st.Stream.Messages)
	// The limit is each pool's: the undecodable message was published
	// straight to the DLQ stream, the rest are pool default's.
	require.EqualValues(t, -1, st.Stream.MaxMessages)
	require.Len(t, st.Pools, 1)
	require.Equal(t, "default", st.Pools[0].Pool)
	require.EqualValues(t, 12, st.Pools[0].Messages)
	require.EqualValues(t, 100, st.Pools[0].MaxMessages)
	require.InDelta(t, 0.12, st.Pools[0].FillRatio, 1e-9)

	st, err = in.Stats(ctx, messages.DLQFilter{ErrorClass: "timeout"})
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Total)

	var buf bytes.Buffer
	n, err := in.Export(ctx, messages.DLQFilter{JobID: "a"}, &buf)
	require.NoError(t, err)
	require.EqualValues(t, 8, n)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 8)
	var ref messages.DLQEntryRef
	require.NoError(t, json.Unmarshal([]byte(lines[7]), &ref))
	require.Equal(t, "item-007", ref.Entry.ItemID)
	require.NotZero(t, ref.Seq)

	purged, err := in.Purge(ctx, messages.DLQFilter{JobID: "a", ErrorClass: "network"})
	require.NoError(t, err)
	require.EqualValues(t, 6, purged)
	purged, err = in.Purge(ctx, messages.DLQFilter{JobID: "a", ErrorClass: "network"})
	require.NoError(t, err)
	require.Zero(t, purged, "purging again finds nothing")
	purged, err = in.Purge(ctx, messages.DLQFilter{Reason: dlq.ReasonUndecodable})
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	st, err = in.Stats(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 2, "b": 4}, st.ByJob)
	require.EqualValues(t, 6, st.Stream.Messages)
}

// A scan stops at the last entry present when it started: entries stored
// meanwhile are left for the next scan.
func TestScanIsBoundedAtStart(t *testing.T) {
	f := newFleet(t, provision.Config{})
	for i := range 3 {
		f.write(t, entry("j", i, "error", "x"))
	}
	in := dlq.NewInspector(f.js, names)
	rep := dlq.NewReplayer(f.js, names, in)
	ctx := testCtx(t, 30*time.Second)
	var seen int
	_, err := rep.Replay(ctx, dlq.ReplayOptions{
		Filter: messages.DLQFilter{JobID: "j"},
		Limiter: limiterFunc(func() error {
			if seen++; seen == 1 {
				// Dead-letter a new item while the replay runs.
				f.write(t, entry("j", 50, "error", "x"))
			}
			return nil
		}),
	})
	require.NoError(t, err)
	require.Equal(t, 3, seen, "the entry stored during the replay was not replayed")
	page, err := in.List(ctx, messages.DLQFilter{JobID: "j"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "item-050", page.Entries[0].Entry.ItemID)
}
