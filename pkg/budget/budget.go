package budget

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Budget claims retries from job budgets stored in a KV bucket (one key per
// job). One Budget per process is the intended use: it coalesces the
// process's concurrent claims on a job into one compare-and-set. A Budget
// is safe for concurrent use by any number of goroutines; Close stops it.
type Budget struct {
	kv     jetstream.KeyValue
	reader reader
	o      options
	log    zerolog.Logger
	m      *metrics
	id     string // prefix of this instance's claim ids
	seq    atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	life   sync.RWMutex // guards closed against wg.Add; a leaf lock
	closed bool
	wg     sync.WaitGroup

	mu           sync.Mutex
	jobs         map[string]*jobState
	watchStarted bool
	watcher      jetstream.KeyWatcher

	stats struct{ reads, writes, conflicts, errors atomic.Int64 }
}

// Stats counts this Budget's KV traffic since New.
type Stats struct {
	Reads     int64 // record reads (Get and the reads behind compare-and-set)
	Writes    int64 // write attempts (Create and compare-and-set), failed ones included
	Conflicts int64 // compare-and-set attempts refused for a stale revision
	Errors    int64 // other failed requests
}

// New returns a Budget over kv (the fleet_budget bucket; see BucketConfig).
// It makes no request until used.
func New(kv jetstream.KeyValue, opts ...Option) (*Budget, error) {
	if kv == nil {
		return nil, errors.New("budget: nil KeyValue")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, fmt.Errorf("budget: metrics: %w", err)
	}
	var idb [6]byte
	_, _ = rand.Read(idb[:])
	b := &Budget{
		kv:   kv,
		o:    o,
		log:  o.log.With().Str("component", "budget").Logger(),
		m:    m,
		id:   base64.RawURLEncoding.EncodeToString(idb[:]),
		jobs: make(map[string]*jobState),
	}
	b.reader = kvReader{kv}
	if o.js != nil {
		b.reader = newLeaderReader(o.js, kv.Bucket())
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Create stores rec as job's budget unless one exists, so that a
// resubmission cannot reset a budget. It returns the stored record and
// whether this call created it; an existing record is not an error.
// Consumed is kept (normally 0) and Exhausted recomputed.
func (b *Budget) Create(ctx context.Context, job string, rec Record) (Record, bool, error) {
	if err := validJob(job); err != nil {
		return Record{}, false, err
	}
	if err := rec.validate(); err != nil {
		return Record{}, false, err
	}
	rec.Exhausted = rec.Consumed >= rec.Total
	rec.recent = nil
	data, err := json.Marshal(rec)
	if err != nil {
		return Record{}, false, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	b.stats.writes.Add(1)
	rev, err := b.kv.Create(ctx, job, data)
	if err == nil {
		b.observe(job, rec, rev)
		return rec, true, nil
	}
	if !kvcas.IsConflict(err) { // a conflict: the record exists
		b.stats.errors.Add(1)
		return Record{}, false, fmt.Errorf("budget: create %s: %w", job, err)
	}
	existing, err := b.Get(ctx, job)
	return existing, false, err
}

// Get reads job's budget record (from the stream leader with
// WithJetStream). It returns an error matching ErrNotFound when there is
// none.
func (b *Budget) Get(ctx context.Context, job string) (Record, error) {
	if err := validJob(job); err != nil {
		return Record{}, err
	}
	rec, rev, err := b.read(ctx, job)
	if err != nil {
		return Record{}, err
	}
	b.observe(job, rec, rev)
	return rec, nil
}

// Claim asks for one retry of an item of job that has already been granted
// itemRetries retries (the caller keeps that count in the item's state).
// The per-item cap is checked first, then one unit is taken from the job
// budget by compare-and-set. A refusal is a Grant with a Deny, not an
// error; errors are infrastructure failures (or ctx ending) after which
// nothing was granted. Conflicts and transient failures are retried with
// jittered backoff until ctx ends.
//
// A granted unit is recorded in KV before Claim returns it. A unit whose
// caller gave up (ctx) while its write was in flight is kept for the next
// claim on the job in this process; it is never granted twice.
func (b *Budget) Claim(ctx context.Context, job string, itemRetries int) (Grant, error) {
	g, err := b.claim(ctx, job, itemRetries)
	b.m.claim(g, err)
	return g, err
}

func (b *Budget) claim(ctx context.Context, job string, itemRetries int) (Grant, error) {
	if err := validJob(job); err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	st, err := b.state(job)
	if err != nil {
		return Grant{}, err
	}
	if !b.o.coalesce {
		return b.claimDirect(ctx, st, max(itemRetries, 0))
	}
	w := &waiter{itemRetries: max(itemRetries, 0), ch: make(chan result, 1)}
	st.mu.Lock()
	if g, ok := st.decideLocked(w.itemRetries); ok {
		st.mu.Unlock()
		return g, nil
	}
	st.pending = append(st.pending, w)
	if !st.flushing {
		if !b.spawn(func() { b.flush(st) }) {
			st.pending = st.pending[:len(st.pending)-1]
			st.mu.Unlock()
			return Grant{}, ErrClosed
		}
		st.flushing = true
	}
	st.mu.Unlock()

	select {
	case r := <-w.ch:
		return r.g, r.err
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, abandoned) {
			return Grant{}, ctx.Err()
		}
		r := <-w.ch // resolved at the same moment: take it, a granted unit is not lost
		return r.g, r.err
	}
}

// Forget drops what this process remembers of job (cached record, known
// exhaustion) and removes the job's remaining-budget gauge. Call it when
// the job ends. Claims in flight finish normally.
func (b *Budget) Forget(job string) {
	b.mu.Lock()
	st := b.jobs[job]
	delete(b.jobs, job)
	b.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		st.forgotten = true
		st.mu.Unlock()
	}
	b.m.remaining.DeleteLabelValues(job)
}

// Close stops the watch, fails waiting claims with ErrClosed and waits for
// the Budget's goroutines to end. It does not close the NATS connection.
// Safe to call more than once.
func (b *Budget) Close() error {
	b.life.Lock()
	if b.closed {
		b.life.Unlock()
		return nil
	}
	b.closed = true
	b.life.Unlock()
	b.cancel()
	b.mu.Lock()
	w := b.watcher
	b.watcher = nil
	b.mu.Unlock()
	if w != nil {
		_ = w.Stop()
	}
	b.wg.Wait()
	return nil
}

// Stats returns this Budget's KV traffic counters.
func (b *Budget) Stats() Stats {
	return Stats{
		Reads: b.stats.reads.Load(), Writes: b.stats.writes.Load(),
		Conflicts: b.stats.conflicts.Load(), Errors: b.stats.errors.Load(),
	}
}

// state returns job's state, creating it (and starting the watch) on first use.
func (b *Budget) state(job string) (*jobState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return nil, ErrClosed
	}
	st := b.jobs[job]
	if st == nil {
		st = &jobState{b: b, job: job, inDoubt: map[string]int{}}
		b.jobs[job] = st
	}
	if b.o.watch && !b.watchStarted {
		if b.spawn(b.watch) {
			b.watchStarted = true
		}
	}
	return st, nil
}

// observe feeds a record read or written outside a claim into job's state,
// if this process tracks the job.
func (b *Budget) observe(job string, rec Record, rev uint64) {
	b.mu.Lock()
	st := b.jobs[job]
	b.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		st.observeLocked(rec, rev)
		st.mu.Unlock()
	}
}

// spawn runs f in a goroutine Close waits for, unless the Budget is closed.
func (b *Budget) spawn(f func()) bool {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// nextClaimID is unique across processes (random instance prefix).
func (b *Budget) nextClaimID() string {
	return b.id + "." + strconv.FormatUint(b.seq.Add(1), 36)
}

// ownsClaim reports whether id was written by this Budget.
func (b *Budget) ownsClaim(id string) bool {
	return len(id) > len(b.id) && id[:len(b.id)] == b.id && id[len(b.id)] == '.'
}

// watch follows every update of the bucket (one ordered consumer per
// process), so that records moved or exhausted by other processes are
// known without a read.
func (b *Budget) watch() {
	w, err := b.kv.WatchAll(b.ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn().Err(err).Msg("budget watch not started; claims fall back to reads")
		}
		return
	}
	b.mu.Lock()
	if b.ctx.Err() != nil {
		b.mu.Unlock()
		_ = w.Stop()
	} else {
		b.watcher = w
		b.mu.Unlock()
	}
	kvwatch.Follow(b.ctx, w.Updates(), func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		var rec Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return
		}
		b.observe(e.Key(), rec, e.Revision())
	})
}

func validJob(job string) error {
	if err := messages.ValidToken(job); err != nil {
		return fmt.Errorf("%w %q: %v", ErrInvalidJob, job, err)
	}
	return nil
}
