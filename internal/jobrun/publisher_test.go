package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// fakeStream takes work publishes the way the work stream would.
type fakeStream struct {
	mu sync.Mutex
	// refuse, when set, decides per try (1-based) whether the stream
	// refuses a message (the refusal Send reports).
	refuse func(m *nats.Msg, try int) error
	// reject, when set, is returned by Send itself.
	reject error
	// onSend runs for every message sent, under no lock.
	onSend func(m *nats.Msg)
	tries  map[string]int
	stored []*nats.Msg
}

func (s *fakeStream) Send(_ context.Context, msgs []*nats.Msg) (refused []*nats.Msg, lastRefusal error, err error) {
	if s.reject != nil {
		return nil, nil, s.reject
	}
	for _, m := range msgs {
		if s.onSend != nil {
			s.onSend(m)
		}
		s.mu.Lock()
		if s.tries == nil {
			s.tries = map[string]int{}
		}
		id := m.Header.Get(messages.HeaderMsgID)
		s.tries[id]++
		if s.refuse != nil {
			if err := s.refuse(m, s.tries[id]); err != nil {
				refused, lastRefusal = append(refused, m), err
				s.mu.Unlock()
				continue
			}
		}
		s.stored = append(s.stored, m)
		s.mu.Unlock()
	}
	return refused, lastRefusal, nil
}

// storedItems are the work items the stream took, in order.
func (s *fakeStream) storedItems(t *testing.T) (subjects []string, indexes []int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.stored {
		var wi wire.WorkItem
		require.NoError(t, json.Unmarshal(m.Data, &wi))
		require.Equal(t, wire.WorkMsgID("j", wi.ItemID, 0), m.Header.Get(messages.HeaderMsgID))
		subjects = append(subjects, m.Subject)
		indexes = append(indexes, wi.Index)
	}
	return subjects, indexes
}

// fakeJob is the runner's side of publishing: the cursor, the published
// count, and outcomes the test gives.
type fakeJob struct {
	mu        sync.Mutex
	cursor    int64
	published int64
	finished  int64
	done      map[int64]bool
	endAt     int64 // ended once published reaches it (0: never)
	progress  chan struct{}
	advanced  chan int64 // the published count after each advance (when set)
}

func (f *fakeJob) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endAt > 0 && f.published >= f.endAt
}

func (f *fakeJob) isDone(idx int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[idx]
}

func (f *fakeJob) inFlight() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.published - f.finished
}

func (f *fakeJob) advance(cursor, published int64) {
	f.mu.Lock()
	f.cursor = max(f.cursor, cursor)
	f.published += published
	n := f.published
	f.mu.Unlock()
	if f.advanced != nil && published > 0 {
		f.advanced <- n
	}
}

// finish gives one published item an outcome, as a result would.
func (f *fakeJob) finish() {
	f.mu.Lock()
	f.finished++
	f.mu.Unlock()
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

func inlineItems(n int, fields func(i int) string) []json.RawMessage {
	items := make([]json.RawMessage, n)
	for i := range items {
		extra := ""
		if fields != nil {
			extra = ", " + fields(i)
		}
		items[i] = json.RawMessage(fmt.Sprintf(`{"id": "i%d"%s}`, i, extra))
	}
	return items
}

func testPublisher(t *testing.T, spec *messages.JobSpec, js batchSender, job *fakeJob) *publisher {
	t.Helper()
	names, err := messages.NewNames("fleet")
	require.NoError(t, err)
	if spec.Pool == "" {
		spec.Pool = "default"
	}
	if job.progress == nil {
		job.progress = make(chan struct{}, 1)
	}
	return &publisher{
		job: "j", spec: spec, cursor: job.cursor, items: int64(len(spec.Items)), batch: 3,
		window: window{int64(spec.MaxParallel)}, names: names, send: js,
		maxPayload: func() int64 { return 1 << 20 }, state: job, progress: job.progress,
		after: time.After, log: zerolog.Nop(), metrics: newMetrics(nil, func() float64 { return 0 }),
	}
}

func runPublisher(t *testing.T, p *publisher) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return p.run(ctx)
}

// Items go out in input order, a batch at a time, each to its pool's
// subject with its dedupe id; the cursor ends past the last.
func TestPublisherPublishesInOrder(t *testing.T) {
	t.Parallel()
	js, job := &fakeStream{}, &fakeJob{}
	p := testPublisher(t, &messages.JobSpec{Items: inlineItems(7, nil)}, js, job)
	require.NoError(t, runPublisher(t, p))
	subjects, indexes := js.storedItems(t)
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6}, indexes)
	for _, s := range subjects {
		require.Equal(t, "fleet.work.default.j", s)
	}
	require.EqualValues(t, 7, job.cursor)
	require.EqualValues(t, 7, job.published)
	require.EqualValues(t, 7, counterValue(t, p.metrics.published))
}

// A group routed to a pool of its name is published there.
func TestPublisherRoutesGroups(t *testing.T) {
	t.Parallel()
	js, job := &fakeStream{}, &fakeJob{}
	spec := &messages.JobSpec{Pool: "cpu", GroupBy: "${item.region}", Items: inlineItems(4, func(i int) string {
		return fmt.Sprintf(`"region": %q`, []string{"eu", "us"}[i%2])
	})}
	p := testPublisher(t, spec, js, job)
	p.routes = map[string]string{"eu": "gpu"}
	require.NoError(t, runPublisher(t, p))
	subjects, _ := js.storedItems(t)
	require.Equal(t, []string{"fleet.work.gpu.j", "fleet.work.cpu.j", "fleet.work.gpu.j", "fleet.work.cpu.j"}, subjects)
}

// A restarted job publishes from its cursor, skipping items that have an
// outcome already, and moves the cursor past them.
func TestPublisherResumesFromTheCursor(t *testing.T) {
	t.Parallel()
	js := &fakeStream{}
	job := &fakeJob{cursor: 2, published: 2, done: map[int64]bool{0: true, 1: true, 3: true, 6: true}}
	p := testPublisher(t, &messages.JobSpec{Items: inlineItems(7, nil)}, js, job)
	require.NoError(t, runPublisher(t, p))
	_, indexes := js.storedItems(t)
	require.Equal(t, []int64{2, 4, 5}, indexes)
	require.EqualValues(t, 7, job.cursor, "past the done items at the end too")
	require.EqualValues(t, 5, job.published)

	job = &fakeJob{cursor: 7}
	p = testPublisher(t, &messages.JobSpec{Items: inlineItems(7, nil)}, &fakeStream{}, job)
	require.NoError(t, runPublisher(t, p), "nothing left to publish")
}

// max_parallel: never more items out without an outcome than the window,
// and the window is filled as outcomes come in.
func TestPublisherKeepsTheWindow(t *testing.T) {
	t.Parallel()
	const items, limit = 25, 4
	var (
		mu               sync.Mutex
		sent, outcomes   int64
		most, violations int64
	)
	js := &fakeStream{onSend: func(*nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		sent++
		out := sent - outcomes
		most = max(most, out)
		if out > limit {
			violations++
		}
	}}
	job := &fakeJob{advanced: make(chan int64, items), progress: make(chan struct{}, 1)}
	p := testPublisher(t, &messages.JobSpec{MaxParallel: limit, Items: inlineItems(items, nil)}, js, job)
	p.batch = 512 // the window, not the batch, bounds what is out

	// The "agents": each published item gets an outcome, one at a time.
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		var finished int64
		for published := range job.advanced {
			for ; finished < published; finished++ {
				mu.Lock()
				outcomes++
				mu.Unlock()
				job.finish()
			}
			if finished == items {
				return
			}
		}
	}()
	require.NoError(t, runPublisher(t, p))
	<-agentDone
	require.Zero(t, violations)
	require.EqualValues(t, limit, most, "the window was filled")
	_, indexes := js.storedItems(t)
	require.Len(t, indexes, items)
}

// A full window and a cancelled context: the publisher returns ctx's error.
func TestPublisherWaitIsCancellable(t *testing.T) {
	t.Parallel()
	job := &fakeJob{}
	p := testPublisher(t, &messages.JobSpec{MaxParallel: 2, Items: inlineItems(5, nil)}, &fakeStream{}, job)
	p.batch = 1
	ctx, cancel := context.WithCancel(t.Context())
	job.advanced = make(chan int64, 5)
	go func() {
		for n := range job.advanced {
			if n == 2 {
				cancel() // the window is full; no outcome will come
			}
		}
	}()
	require.ErrorIs(t, p.run(ctx), context.Canceled)
	require.EqualValues(t, 2, job.published)
	close(job.advanced)
}

// Publishing stops once the map phase ended.
func TestPublisherStopsWhenTheMapEnds(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 10} {
		js, job := &fakeStream{}, &fakeJob{endAt: 3}
		p := testPublisher(t, &messages.JobSpec{MaxParallel: limit, Items: inlineItems(9, nil)}, js, job)
		p.batch = 1
		require.NoError(t, runPublisher(t, p))
		_, indexes := js.storedItems(t)
		require.Equal(t, []int64{0, 1, 2}, indexes, "max_parallel %d", limit)
	}
}

// Publishes a full stream refuses are sent again after a backoff that
// doubles up to its cap; the batch counts once.
func TestPublisherRetriesRefusedPublishes(t *testing.T) {
	t.Parallel()
	full := errors.New("nats: maximum messages exceeded")
	js := &fakeStream{refuse: func(m *nats.Msg, try int) error {
		if m.Header.Get(messages.HeaderMsgID) == wire.WorkMsgID("j", "i1", 0) && try <= 7 {
			return full
		}
		return nil
	}}
	job := &fakeJob{}
	p := testPublisher(t, &messages.JobSpec{Items: inlineItems(3, nil)}, js, job)
	var delays []time.Duration
	p.after = func(d time.Duration) <-chan time.Time {
		delays = append(delays, d)
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	require.NoError(t, runPublisher(t, p))
	ms := time.Millisecond
	require.Equal(t, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms}, delays)
	_, indexes := js.storedItems(t)
	require.Equal(t, []int64{0, 2, 1}, indexes, "the refused one went in later")
	require.EqualValues(t, 3, job.published)
	require.EqualValues(t, 7, counterValue(t, p.metrics.publishRetries))
	require.EqualValues(t, 3, counterValue(t, p.metrics.published))
}

// An item over the server's max_payload can never be published: the
// publisher fails (the job ends with input_error) instead of retrying.
func TestPublisherFailsOnMaxPayload(t *testing.T) {
	t.Parallel()
	job := &fakeJob{}
	p := testPublisher(t, &messages.JobSpec{Items: inlineItems(2, nil)}, &fakeStream{reject: nats.ErrMaxPayload}, job)
	err := runPublisher(t, p)
	require.ErrorContains(t, err, "max_payload 1048576")
	require.Zero(t, job.published)
	require.Zero(t, job.cursor)
}

func TestWindow(t *testing.T) {
	t.Parallel()
	require.False(t, window{0}.full(1000, 1000), "0: no bound")
	require.False(t, window{3}.full(1, 1))
	require.True(t, window{3}.full(2, 1))
	require.True(t, window{3}.full(5, 0))
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// encodeWork writes what json.Marshal writes, whichever way it takes.
func TestEncodeWorkIsJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, it := range []expand.Item{
		{Index: 0, ID: "item-1", Raw: json.RawMessage(`{"id":"item-1","n":[1,2.5e3,null,true]}`)},
		{Index: 12, ID: "a", Group: "eu", Raw: json.RawMessage(`"x"`)},
		{Index: 3, ID: "spaced", Raw: json.RawMessage("{ \"a\" : \"b c\" }")},
		{Index: 4, ID: "<&>", Group: "g\"q", Raw: json.RawMessage(`{"h":"<b>&amp;"}`)},
		{Index: 5, ID: "é\u2028", Raw: json.RawMessage(`{"u":"\u2028é"}`)},
		{Index: 6, ID: "ctl\x01", Raw: json.RawMessage(`7`)},
	} {
		got, err := encodeWork("job-1", "default", it, nil)
		require.NoError(t, err)
		want, err := json.Marshal(&wire.WorkItem{JobID: "job-1", ItemID: it.ID, Index: it.Index, Group: it.Group,
			Payload: it.Raw, CorrelationID: "job-1:" + strconv.FormatInt(it.Index, 10)})
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

// The fair share (--job-queue) bounds the job's messages in the work
// stream, as the server counts them: with every item still queued the
// publisher stops at the limit; once the server says they left the stream
// (parked: no outcome) it publishes more.
func TestPublisherKeepsTheFairShare(t *testing.T) {
	t.Parallel()
	const items, limit = 10, 3
	now := func(time.Duration) <-chan time.Time { // the recheck is due at once
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}

	t.Run("queued", func(t *testing.T) {
		js, job := &fakeStream{}, &fakeJob{advanced: make(chan int64, items)}
		p := testPublisher(t, &messages.JobSpec{Items: inlineItems(items, nil)}, js, job)
		p.batch, p.after = 1, now
		ctx, cancel := context.WithCancel(t.Context())
		counts := 0
		p.queue = queue{limit: limit, count: func(context.Context) (int64, error) {
			if counts++; counts == 5 {
				cancel() // asked again and again: it stays full
			}
			return job.inFlight(), nil // nothing left the stream
		}}
		require.ErrorIs(t, p.run(ctx), context.Canceled)
		require.EqualValues(t, limit, job.published)
	})

	t.Run("parked", func(t *testing.T) {
		js, job := &fakeStream{}, &fakeJob{}
		p := testPublisher(t, &messages.JobSpec{Items: inlineItems(items, nil)}, js, job)
		p.batch, p.after = 2, now
		p.queue = queue{limit: limit, count: func(context.Context) (int64, error) {
			return 0, nil // every item published so far was parked
		}}
		require.NoError(t, runPublisher(t, p))
		require.EqualValues(t, items, job.published, "parked items free the share without an outcome")
		require.EqualValues(t, items, job.inFlight(), "no outcome came")
	})
}
