package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Durable replays. A DLQ replay is a record in the control bucket (key
// replay.<id>): its request (filter, bound, rate, reset), its status and
// counts, and whether a cancel was asked for. Any coordinator creates one
// (dlq.replay) or asks to cancel one (dlq.replay.cancel); every
// coordinator follows the records with a watch (replayBook) and answers
// dlq.replays from it. The leader runs the records that are running
// (Run), writes their progress at most every replayWriteEvery, and
// their end. A leader that dies mid-replay leaves the record running: the
// next one runs it again over the entries still in the DLQ. Each step of an
// entry's replay is idempotent — the reopen marker and the republished item
// carry message ids derived from job, item and generation, which the
// streams' duplicate windows drop when written again, and the runner counts
// a generation once — so an entry the dead leader had half replayed is
// finished without a duplicate.

// replayWriteEvery throttles a running replay's progress writes.
var replayWriteEvery = 250 * time.Millisecond

// replayRecord is a replay's value in the control bucket.
type replayRecord struct {
	// V is the schema version (docs/contract.md §8).
	V      messages.Schema          `json:"v"`
	Status messages.DLQReplayStatus `json:"status"`
	// UpTo is the last DLQ sequence the replay's plan counted; it never
	// replays entries dead-lettered after it started.
	UpTo uint64 `json:"up_to"`
	// Cancel asks the leader to stop the replay (dlq.replay.cancel).
	Cancel bool `json:"cancel,omitempty"`
	// Runs counts the leaders that started running it: more than one means
	// it was resumed after a failover.
	Runs int `json:"runs,omitempty"`
}

// replayBook is every coordinator's view of the replay records, fed by a
// watch. Safe for concurrent use.
type replayBook struct {
	mu      sync.Mutex
	recs    map[string]bookEntry
	ready   chan struct{}
	once    sync.Once
	changed chan struct{} // cap 1: something changed (the leader looks)
}

type bookEntry struct {
	rec replayRecord
	rev uint64
}

func newReplayBook() *replayBook {
	return &replayBook{recs: map[string]bookEntry{}, ready: make(chan struct{}), changed: make(chan struct{}, 1)}
}

// keep follows the replay records until ctx ends, watching again after a
// closed watch.
func (b *replayBook) keep(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger) {
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, wire.ReplayKey("*"))
		if err == nil {
			err = kvwatch.Watch(ctx, w, func() { b.once.Do(func() { close(b.ready) }) }, b.apply)
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn().Err(err).Msg("watch of the replays stopped; watching again")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (b *replayBook) apply(e jetstream.KeyValueEntry) {
	id := e.Key()[len(wire.ReplayKey("")):]
	b.mu.Lock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(b.recs, id)
	} else if cur, ok := b.recs[id]; !ok || cur.rev < e.Revision() {
		var rec replayRecord
		if json.Unmarshal(e.Value(), &rec) == nil {
			b.recs[id] = bookEntry{rec: rec, rev: e.Revision()}
		}
	}
	b.mu.Unlock()
	b.nudge()
}

// see records a write this coordinator made, before the watch brings it.
func (b *replayBook) see(id string, rec replayRecord, rev uint64) {
	b.mu.Lock()
	if cur, ok := b.recs[id]; !ok || cur.rev < rev {
		b.recs[id] = bookEntry{rec: rec, rev: rev}
	}
	b.mu.Unlock()
	b.nudge()
}

func (b *replayBook) nudge() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *replayBook) wait(ctx context.Context) error {
	select {
	case <-b.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *replayBook) get(id string) (replayRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.recs[id]
	return e.rec, ok
}

// all returns the records, newest first.
func (b *replayBook) all() []replayRecord {
	b.mu.Lock()
	recs := make([]replayRecord, 0, len(b.recs))
	for _, e := range b.recs {
		recs = append(recs, e.rec)
	}
	b.mu.Unlock()
	slices.SortFunc(recs, func(x, y replayRecord) int {
		if c := startedAt(y).Compare(startedAt(x)); c != 0 {
			return c
		}
		return cmpString(y.Status.ReplayID, x.Status.ReplayID)
	})
	return recs
}

func startedAt(r replayRecord) time.Time {
	if r.Status.StartedAt == nil {
		return time.Time{}
	}
	return *r.Status.StartedAt
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// waitEnded waits until replay id has ended or ctx ends, and returns its
// last status.
func (b *replayBook) waitEnded(ctx context.Context, id string) messages.DLQReplayStatus {
	for {
		rec, _ := b.get(id)
		if rec.Status.State != messages.ReplayRunning {
			return rec.Status
		}
		select {
		case <-ctx.Done():
			return rec.Status
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// updateReplay changes replay id's record with fn, by compare-and-set on a
// read from the stream leader, until it is stored or ctx ends. fn returns
// false to write nothing.
func (s *Replays) updateReplay(ctx context.Context, id string, fn func(*replayRecord) bool) (replayRecord, error) {
	for {
		rec, rev, err := s.readReplay(ctx, id)
		if err != nil {
			return replayRecord{}, err
		}
		if !fn(&rec) {
			return rec, nil
		}
		nrev, err := s.putReplay(ctx, rec, rev)
		if err == nil {
			s.book.see(id, rec, nrev)
			return rec, nil
		}
		if !kvcas.IsConflict(err) {
			return rec, err
		}
	}
}

// readReplay reads replay id's record from the stream leader: a read that
// never goes back to an older revision, whichever coordinator makes it
// (the coordinators' watches may lag one another by a write).
func (s *Replays) readReplay(ctx context.Context, id string) (replayRecord, uint64, error) {
	data, rev, err := kvleader.New(s.js, s.names.ControlBucket()).Get(ctx, wire.ReplayKey(id))
	if err != nil {
		return replayRecord{}, 0, err
	}
	if data == nil {
		return replayRecord{}, 0, ErrNoReplay
	}
	var rec replayRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return replayRecord{}, 0, fmt.Errorf("replay %s: %w", id, err)
	}
	return rec, rev, nil
}

func (s *Replays) putReplay(ctx context.Context, rec replayRecord, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	return kvcas.Write(ctx, s.control, wire.ReplayKey(rec.Status.ReplayID), data, rev)
}

// ErrNoReplay is what a read of a replay that does not exist returns.
var ErrNoReplay = errors.New("replay: no such replay")

// HoldResumed holds the jobs of the replays left running by an earlier
// leader, before this term resumes job runners; Run runs those replays.
func (s *Replays) HoldResumed(ctx context.Context) {
	s.setResumed(s.holdResumed(ctx))
}

func (s *Replays) holdResumed(ctx context.Context) []replayRecord {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.book.wait(wctx); err != nil {
		s.log.Warn().Err(err).Msg("the replays are not loaded yet; resuming without them")
		return nil
	}
	var running []replayRecord
	for _, rec := range s.book.all() {
		if rec.Status.State == messages.ReplayRunning {
			running = append(running, rec)
			s.holdJobs(jobsOf(rec))
		}
	}
	return running
}

func jobsOf(rec replayRecord) []string {
	jobs := make([]string, 0, len(rec.Status.ByJob))
	for j := range rec.Status.ByJob {
		jobs = append(jobs, j)
	}
	return jobs
}

// DropHolds forgets every hold at the end of a leadership term.
func (s *Replays) DropHolds() {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	clear(s.holds)
}

// Run runs the running replays while this coordinator leads: those
// resumed (their jobs already held by HoldResumed) and those created
// meanwhile.
func (s *Replays) Run(ctx context.Context) error {
	resumed := s.setResumed(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]context.CancelFunc{}
	var mu sync.Mutex
	start := func(rec replayRecord, held bool) {
		id := rec.Status.ReplayID
		mu.Lock()
		defer mu.Unlock()
		if _, ok := running[id]; ok {
			return
		}
		rctx, cancel := context.WithCancel(ctx)
		running[id] = cancel
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(running, id)
				mu.Unlock()
				cancel()
			}()
			s.execute(ctx, rctx, rec, held)
		})
	}
	for _, rec := range resumed {
		start(rec, true)
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, rec := range s.book.all() {
			if rec.Status.State != messages.ReplayRunning {
				continue
			}
			mu.Lock()
			cancel, ok := running[rec.Status.ReplayID]
			mu.Unlock()
			switch {
			case ok && rec.Cancel:
				cancel()
			case !ok && !rec.Cancel:
				start(rec, false)
			case !ok && rec.Cancel:
				// Cancelled before any leader ran it (or between two).
				s.end(ctx, rec.Status.ReplayID, dlq.Progress{}, 0, context.Canceled, true)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.book.changed:
		case <-t.C:
		}
	}
}

// execute runs one replay on the leader. term is the leadership term's
// context, rctx the replay's (cancelled on request). A replay cut short by
// the term's end writes nothing more: it stays running for the next
// leader.
func (s *Replays) execute(term, rctx context.Context, rec replayRecord, held bool) {
	id := rec.Status.ReplayID
	st := rec.Status
	// The replay holds its jobs while it runs, whatever way it returns (a
	// resumed one was held before the term resumed the runners).
	jobs := jobsOf(rec)
	if !held {
		s.holdJobs(jobs)
	}
	defer s.releaseJobs(jobs)
	// Entries replayed by an earlier leader are gone from the DLQ: what is
	// left of the plan says how many (or were removed by someone else
	// meanwhile, which is counted with them).
	var base int64
	if cur, _, err := s.readReplay(rctx, id); err != nil {
		return // tried again within a second (Run)
	} else if cur.Runs > 0 { // read afresh: the book may lag the last leader's write
		plan, err := s.rep.PlanUpTo(rctx, st.Filter, rec.UpTo)
		if err != nil {
			if term.Err() == nil {
				s.log.Warn().Err(err).Str("replay_id", id).Msg("re-planning a resumed replay failed; trying again")
			}
			return
		}
		base = max(st.Matched-plan.Matched, 0)
		s.log.Info().Str("replay_id", id).Int64("done_before", base).Int64("left", plan.Matched).Msg("DLQ replay resumed")
	}
	rec, err := s.updateReplay(term, id, func(r *replayRecord) bool {
		if r.Status.State != messages.ReplayRunning {
			return false
		}
		r.Runs++
		r.Status.Replayed, r.Status.Failed, r.Status.Skipped = base, 0, 0
		return true
	})
	if err != nil || rec.Status.State != messages.ReplayRunning {
		return
	}
	limiter, err := dlq.LimiterFor(st.Rate, nil)
	if err != nil {
		s.end(term, id, dlq.Progress{LastError: err.Error()}, base, err, false)
		return
	}
	if rec.Runs == 1 {
		s.jobs.Event(EventsJob(st.Filter), messages.DLQReplayStartedEvent(rec.Status))
	}
	s.metrics.ReplaysInProgress.Inc()
	defer s.metrics.ReplaysInProgress.Dec()

	var (
		pmu      sync.Mutex
		last     dlq.Progress
		reported int64
	)
	writeProgress := func() {
		pmu.Lock()
		p := last
		pmu.Unlock()
		_, _ = s.updateReplay(term, id, func(r *replayRecord) bool {
			if r.Status.State != messages.ReplayRunning {
				return false
			}
			r.Status.Replayed, r.Status.Failed, r.Status.Skipped = base+p.Replayed, p.Failed, p.Skipped
			if p.LastError != "" {
				r.Status.LastError = p.LastError
			}
			return true
		})
	}
	stopWriter := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		t := time.NewTicker(replayWriteEvery)
		defer t.Stop()
		for {
			select {
			case <-stopWriter:
				return
			case <-term.Done():
				return
			case <-t.C:
				writeProgress()
			}
		}
	}()
	prog, err := s.rep.Replay(rctx, dlq.ReplayOptions{
		Filter: st.Filter, UpTo: rec.UpTo, ResetAttempts: st.ResetAttempts, Limiter: limiter,
		OnProgress: func(p dlq.Progress) {
			pmu.Lock()
			if d := p.Replayed - last.Replayed; d > 0 {
				s.metrics.Replayed.Add(float64(d))
			}
			last = p
			handled := p.Replayed + p.Failed + p.Skipped
			emit := handled-reported >= replayEventEvery
			if emit {
				reported = handled
			}
			pmu.Unlock()
			if emit {
				ev := rec.Status
				ev.Replayed, ev.Failed, ev.Skipped = base+p.Replayed, p.Failed, p.Skipped
				s.jobs.Event(EventsJob(st.Filter), messages.DLQReplayProgressEvent(ev))
			}
		},
	})
	close(stopWriter)
	<-writerDone
	s.jobs.ForgetPools(jobs)
	if term.Err() != nil {
		return // the next leader resumes it
	}
	s.end(term, id, prog, base, err, rctx.Err() != nil)
}

// end records a replay's end and publishes its last event.
func (s *Replays) end(ctx context.Context, id string, p dlq.Progress, base int64, err error, cancelled bool) {
	now := s.clock.Now()
	rec, werr := s.updateReplay(ctx, id, func(r *replayRecord) bool {
		if r.Status.State != messages.ReplayRunning {
			return false
		}
		st := &r.Status
		st.Replayed, st.Failed, st.Skipped = base+p.Replayed, p.Failed, p.Skipped
		if p.LastError != "" {
			st.LastError = p.LastError
		}
		switch {
		case cancelled && r.Cancel:
			st.State = messages.ReplayCancelled
		case err == nil:
			st.State = messages.ReplayCompleted
		default:
			st.State = messages.ReplayFailed
			st.LastError = err.Error()
		}
		st.FinishedAt = &now
		return true
	})
	if werr != nil {
		s.log.Warn().Err(werr).Str("replay_id", id).Msg("recording the replay's end failed")
		return
	}
	st := rec.Status
	s.log.Info().Str("replay_id", id).Str("state", st.State).Int64("replayed", st.Replayed).
		Int64("failed", st.Failed).Int64("skipped", st.Skipped).Msg("DLQ replay ended")
	s.jobs.Event(EventsJob(st.Filter), messages.DLQReplayFinishedEvent(st))
	s.forgetOld(ctx)
}

// forgetOld deletes the oldest ended replays beyond keptReplays.
func (s *Replays) forgetOld(ctx context.Context) {
	recs := s.book.all()
	kept := 0
	for _, rec := range recs {
		if rec.Status.State == messages.ReplayRunning {
			continue
		}
		if kept++; kept > keptReplays {
			_ = s.control.Delete(ctx, wire.ReplayKey(rec.Status.ReplayID))
		}
	}
}
