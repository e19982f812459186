package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvstate"
)

// Budget claims retries from job budgets stored in a KV bucket, one key
// per job and pool ([Key]; the methods' job argument is that key). One Budget per process is the intended use: it coalesces the
// process's concurrent claims on a job into one compare-and-set. A Budget
// is safe for concurrent use by any number of goroutines; Close stops it.
type Budget struct {
	store *kvstate.Store[Record]
	o     options
	log   zerolog.Logger
	m     *metrics

	tamperWarn *warnPacer // paces trusted's warning

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	life   sync.RWMutex // guards closed against wg.Add; a leaf lock
	closed bool
	wg     sync.WaitGroup

	mu   sync.Mutex
	jobs map[string]*jobState
}

// Stats counts a Budget's KV traffic since New.
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
	b := &Budget{
		o:    o,
		log:  o.log.With().Str("component", "budget").Logger(),
		m:    m,
		jobs: make(map[string]*jobState),

		tamperWarn: newWarnPacer(o.clock, TamperWarnInterval),
	}
	b.store, err = kvstate.New(kvstate.Config[Record]{
		KV:        kv,
		JetStream: o.js,
		Decode:    decodeRecord,
		WrittenBy: Record.claimed,
		Watch:     o.watch,
		Observe: func(job string, e kvstate.Entry[Record]) {
			if e.Exists {
				e = b.trustedEntry(job, e)
				m.remaining.WithLabelValues(job).Set(float64(e.Value.Remaining()))
			}
		},
		Bounds: kvstate.Bounds{OpTimeout: o.opTimeout},
		Logger: b.log,
	})
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Create stores rec as job's budget unless one exists, so that a
// resubmission cannot reset a budget. It returns the stored record and
// whether this call created it; an existing record is not an error.
// Consumed is kept (normally 0) and Exhausted recomputed.
func (b *Budget) Create(ctx context.Context, job string, rec Record) (Record, bool, error) {
	if err := validKey(job); err != nil {
		return Record{}, false, err
	}
	if err := rec.validate(); err != nil {
		return Record{}, false, err
	}
	rec.Exhausted = rec.Consumed >= rec.Total
	rec.recent = nil
	e, created, err := b.store.Create(ctx, job, rec)
	switch {
	case err != nil:
		return Record{}, false, fmt.Errorf("budget: create %s: %w", job, err)
	case !e.Exists:
		return Record{}, false, fmt.Errorf("%w: job %s (deleted while created)", ErrNotFound, job)
	}
	return e.Value, created, nil
}

// Get reads job's budget record (from the stream leader with
// WithJetStream). It returns an error matching ErrNotFound when there is
// none.
func (b *Budget) Get(ctx context.Context, job string) (Record, error) {
	if err := validKey(job); err != nil {
		return Record{}, err
	}
	e, err := b.store.Read(ctx, job)
	e = b.trustedEntry(job, e)
	switch {
	case err != nil:
		return Record{}, fmt.Errorf("budget: read %s: %w", job, err)
	case !e.Exists:
		return Record{}, fmt.Errorf("%w: job %s", ErrNotFound, job)
	}
	return e.Value, nil
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
	if err := validKey(job); err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	st, err := b.state(job)
	if err != nil {
		return Grant{}, err
	}
	w := &waiter{itemRetries: max(itemRetries, 0), ch: make(chan result, 1)}
	e, _, known := b.store.Cached(job)
	e = b.trustedEntry(job, e)
	st.mu.Lock()
	if g, ok := st.decideLocked(e, known, w.itemRetries); ok {
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
	delete(b.jobs, job)
	b.mu.Unlock()
	b.store.Forget(job)
	b.m.remaining.DeleteLabelValues(job)
	b.tamperWarn.forget(job)
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
	b.wg.Wait()
	b.store.Close()
	return nil
}

// Stats returns this Budget's KV traffic counters.
func (b *Budget) Stats() Stats {
	x := b.store.Stats()
	return Stats{Reads: x.Reads, Writes: x.Writes, Conflicts: x.Conflicts, Errors: x.Errors}
}

// state returns job's claim state, creating it on first use.
func (b *Budget) state(job string) (*jobState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return nil, ErrClosed
	}
	st := b.jobs[job]
	if st == nil {
		st = &jobState{job: job}
		b.jobs[job] = st
	}
	return st, nil
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
