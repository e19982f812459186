package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// jobState is what one process knows about one job's budget. Every field
// below mu is guarded by it.
type jobState struct {
	b   *Budget
	job string

	mu        sync.Mutex
	known     bool   // rec/rev are a record read or written (possibly stale)
	rec       Record // latest record seen
	rev       uint64 // its revision
	exhausted bool   // the KV said consumed >= total: it never refills
	surplus   int    // units recorded in KV for this process, not yet handed out
	pending   []*waiter
	flushing  bool           // a flush goroutine owns the compare-and-set
	inDoubt   map[string]int // claim id -> units of writes whose outcome is unknown
	forgotten bool
}

// decideLocked settles a claim without KV if it can: per-item cap (as
// Record.Claim checks it), then a unit already recorded for this process,
// then known exhaustion.
func (st *jobState) decideLocked(itemRetries int) (Grant, bool) {
	if st.known {
		if g, denied := st.rec.itemDenial(itemRetries); denied {
			return g, true
		}
	}
	if st.surplus > 0 {
		st.surplus--
		return granted, true
	}
	if st.exhausted {
		return denyJob(st.rec.Consumed, st.rec.Total), true
	}
	return Grant{}, false
}

// observeLocked records a record seen at rev (from a read, a write or the
// watch). Older revisions are ignored. Claims of this process whose write
// was in doubt and that the record lists are now known to be recorded:
// their units become surplus.
func (st *jobState) observeLocked(rec Record, rev uint64) {
	if rev < st.rev || rev == st.rev && st.known {
		return
	}
	rec = st.b.trusted(st.job, rec)
	st.rec, st.rev, st.known = rec, rev, true
	if len(st.inDoubt) > 0 {
		for _, c := range rec.recent {
			if units, ok := st.inDoubt[c.ID]; ok {
				delete(st.inDoubt, c.ID)
				st.surplus += units
				st.b.m.consumed.Add(float64(units))
				st.b.log.Debug().Str("job_id", st.job).Int("units", units).Msg("in-doubt budget write found recorded")
			}
		}
	}
	if rec.Consumed >= rec.Total && !st.exhausted {
		st.exhausted = true
		if n := len(rec.recent); n > 0 && st.b.ownsClaim(rec.recent[n-1].ID) {
			st.b.m.exhausted.WithLabelValues(ScopeJob).Inc()
			st.b.log.Info().Str("job_id", st.job).Int("consumed", rec.Consumed).Int("limit", rec.Total).Msg("job retry budget exhausted")
		}
	}
	if !st.forgotten {
		st.b.m.remaining.WithLabelValues(st.job).Set(float64(rec.Remaining()))
	}
}

// trusted returns rec with the limits WithLimits knows for job, and a
// Consumed that is never negative.
func (b *Budget) trusted(job string, rec Record) Record {
	if f := b.o.limits; f != nil {
		if total, perItem, ok := f(job); ok && (rec.Total != total || rec.PerItemMax != perItem) {
			b.log.Warn().Str("job_id", job).Int("stored_total", rec.Total).Int("total", total).
				Int("stored_per_item_max", rec.PerItemMax).Int("per_item_max", perItem).
				Msg("budget record's limits are not the job's; using the job's")
			rec.Total, rec.PerItemMax = total, perItem
		}
	}
	rec.Consumed = max(rec.Consumed, 0)
	rec.Exhausted = rec.Consumed >= rec.Total
	return rec
}

// invalidateLocked marks the cached record stale after a failed write at rev.
func (st *jobState) invalidateLocked(rev uint64) {
	if st.rev == rev {
		st.known = false
	}
}

type waiterState = int32

const (
	waiting waiterState = iota
	resolved
	abandoned
)

// waiter is one Claim call waiting for the flush goroutine.
type waiter struct {
	itemRetries int
	state       atomic.Int32
	ch          chan result // capacity 1
}

type result struct {
	g   Grant
	err error
}

// resolve hands the outcome to the waiter unless it has given up.
func (w *waiter) resolve(g Grant, err error) bool {
	if !w.state.CompareAndSwap(waiting, resolved) {
		return false
	}
	w.ch <- result{g, err}
	return true
}

// flush serves st's waiting claims until none are left: it claims as many
// units as there are waiters with one compare-and-set, and hands the
// recorded units out. It runs in one goroutine per job at a time.
func (b *Budget) flush(st *jobState) {
	var batch []*waiter
	attempt := 0
	for {
		st.mu.Lock()
		batch = st.settleLocked(append(batch, st.pending...))
		st.pending = nil
		if len(batch) == 0 || b.ctx.Err() != nil {
			for _, w := range batch {
				w.resolve(Grant{}, ErrClosed)
			}
			st.flushing = false
			st.mu.Unlock()
			return
		}
		known, rec, rev := st.known, st.rec, st.rev
		st.mu.Unlock()

		if !known {
			if err := b.refresh(b.ctx, st); err != nil {
				if isPermanent(err) {
					batch = b.fail(st, batch, err)
					continue
				}
				attempt++
				_ = b.sleep(b.ctx, attempt, errorBackoff)
			}
			continue
		}

		want := len(batch)
		if b.o.maxBatch > 0 {
			want = min(want, b.o.maxBatch)
		}
		units := min(want, rec.Remaining())
		if units <= 0 { // the record we hold is exhausted
			st.mu.Lock()
			st.exhausted = true
			st.mu.Unlock()
			continue
		}
		err := b.write(b.ctx, st, rec, rev, units)
		switch {
		case err == nil:
			attempt = 0
		case kvcas.IsConflict(err):
			attempt++
			_ = b.sleep(b.ctx, attempt, conflictBackoff)
		case isPermanent(err):
			batch = b.fail(st, batch, err)
		default:
			attempt++
			_ = b.sleep(b.ctx, attempt, errorBackoff)
		}
	}
}

// fail resolves batch's waiters with err, which retrying will not fix
// (ErrClosed once the Budget is closing), and returns the empty batch.
func (b *Budget) fail(st *jobState, batch []*waiter, err error) []*waiter {
	if b.ctx.Err() != nil {
		err = ErrClosed
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range batch {
		w.resolve(Grant{}, err)
	}
	return nil
}

// settleLocked resolves the waiters that need no KV and returns the others.
func (st *jobState) settleLocked(batch []*waiter) []*waiter {
	live := batch[:0]
	for _, w := range batch {
		if w.state.Load() != waiting {
			continue // gave up
		}
		if g, ok := st.decideLocked(w.itemRetries); ok {
			if !w.resolve(g, nil) && g.Granted {
				st.surplus++ // gave up just now: keep the unit
			}
			continue
		}
		live = append(live, w)
	}
	clear(batch[len(live):])
	return live
}

// claimDirect is Claim without coalescing: one unit per compare-and-set,
// in the caller's goroutine, bounded by ctx.
func (b *Budget) claimDirect(ctx context.Context, st *jobState, itemRetries int) (Grant, error) {
	attempt := 0
	for {
		if b.ctx.Err() != nil {
			return Grant{}, ErrClosed
		}
		st.mu.Lock()
		if g, ok := st.decideLocked(itemRetries); ok {
			st.mu.Unlock()
			return g, nil
		}
		known, rec, rev := st.known, st.rec, st.rev
		st.mu.Unlock()

		var err error
		switch {
		case !known:
			err = b.refresh(ctx, st)
		case rec.Remaining() == 0:
			st.mu.Lock()
			st.exhausted = true
			st.mu.Unlock()
			continue
		default:
			if err = b.write(ctx, st, rec, rev, 1); err == nil {
				continue // the unit is in surplus: decideLocked hands it out
			}
		}
		if err == nil {
			continue
		}
		if isPermanent(err) {
			return Grant{}, err
		}
		attempt++
		backoff := errorBackoff
		if kvcas.IsConflict(err) {
			backoff = conflictBackoff
		}
		if err := b.sleep(ctx, attempt, backoff); err != nil {
			return Grant{}, err
		}
	}
}

// write claims units on top of rec (at rev) with one compare-and-set. The
// claim id is registered as in doubt before the request goes out, and its
// units are credited to st's surplus exactly once: by the reply, or by any
// record (read or watched) that lists the id, whichever comes first. So a
// write whose reply is lost, or that the watch reports before its reply
// arrives, is never counted twice nor lost while the id is in the record's
// recent claims.
func (b *Budget) write(ctx context.Context, st *jobState, rec Record, rev uint64, units int) error {
	id := b.nextClaimID()
	next := rec.consume(units, id)
	data, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	st.mu.Lock()
	st.inDoubt[id] = units
	st.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, b.o.opTimeout)
	defer cancel()
	b.stats.writes.Add(1)
	newRev, err := b.kv.Update(octx, st.job, data, rev)

	st.mu.Lock()
	defer st.mu.Unlock()
	_, uncredited := st.inDoubt[id]
	switch {
	case err == nil:
		if uncredited {
			delete(st.inDoubt, id)
			st.surplus += units
			b.m.consumed.Add(float64(units))
		}
		st.observeLocked(next, newRev)
		return nil
	case kvcas.IsConflict(err):
		delete(st.inDoubt, id) // refused: it was not written
		b.stats.conflicts.Add(1)
		st.invalidateLocked(rev)
		return err
	case !uncredited:
		return nil // the reply was lost, but a record already showed it written
	default:
		b.stats.errors.Add(1)
		st.invalidateLocked(rev)
		b.log.Debug().Err(err).Str("job_id", st.job).Int("units", units).Msg("budget write failed; outcome in doubt")
		return fmt.Errorf("budget: update %s: %w", st.job, err)
	}
}

// refresh reads st's record from KV.
func (b *Budget) refresh(ctx context.Context, st *jobState) error {
	rec, rev, err := b.read(ctx, st.job)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.observeLocked(rec, rev)
	stale := !st.known // older than a revision already seen: a lagging replica
	st.mu.Unlock()
	if stale {
		return errStaleRead
	}
	return nil
}

// errStaleRead is transient: the read came from a replica behind a
// revision this process has already seen.
var errStaleRead = errors.New("budget: stale read")

func (b *Budget) read(ctx context.Context, job string) (Record, uint64, error) {
	octx, cancel := context.WithTimeout(ctx, b.o.opTimeout)
	defer cancel()
	b.stats.reads.Add(1)
	rec, rev, err := b.reader.get(octx, job)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			b.stats.errors.Add(1)
		}
		return Record{}, 0, fmt.Errorf("budget: read %s: %w", job, err)
	}
	return rec, rev, nil
}

// The claim loops' backoffs: delays doubling from the Min to the Max
// constant, with equal jitter (attempt n waits between d/2 and d).
var (
	conflictBackoff = retry.Exponential(ConflictBackoffMin, ConflictBackoffMax).WithJitter(messages.JitterEqual, 0)
	errorBackoff    = retry.Exponential(ErrorBackoffMin, ErrorBackoffMax).WithJitter(messages.JitterEqual, 0)
)

// sleep waits backoff's delay after failed attempt n, or until ctx ends.
func (b *Budget) sleep(ctx context.Context, attempt int, backoff *retry.Policy) error {
	return retry.Sleep(ctx, nil, backoff.Delay(attempt, 0, nil))
}

// isPermanent reports errors that retrying will not fix.
func isPermanent(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrClosed) ||
		kvcas.IsPermanent(err)
}
