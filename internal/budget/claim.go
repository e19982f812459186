package budget

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jetfleet/jetfleet/internal/kvstate"
)

// jobState is what one process's claims on one job share: the waiting
// claims and the units recorded for them. The job's record itself is in the
// Budget's kvstate.Store. Every field below mu is guarded by it.
type jobState struct {
	job string

	mu       sync.Mutex
	surplus  int // units recorded in KV for this process, not yet handed out
	pending  []*waiter
	flushing bool // a flush goroutine owns the compare-and-set
}

// decideLocked settles a claim without KV if it can, from the last record
// seen (e; known false when there is none): per-item cap (as Record.Claim
// checks it), then a unit already recorded for this process, then
// exhaustion. A stale record serves: its caps never change and a budget
// never refills.
func (st *jobState) decideLocked(e kvstate.Entry[Record], known bool, itemRetries int) (Grant, bool) {
	known = known && e.Exists
	if known {
		if g, denied := e.Value.itemDenial(itemRetries); denied {
			return g, true
		}
	}
	if st.surplus > 0 {
		st.surplus--
		return granted, true
	}
	if known && e.Value.Remaining() == 0 {
		return denyJob(e.Value.Consumed, e.Value.Total), true
	}
	return Grant{}, false
}

// trusted returns rec with the limits WithLimits knows for job, and a
// Consumed that is never negative: agents may write the budget bucket, so
// only their spending is taken from it. A record whose limits are not the
// job's is warned about at most once per TamperWarnInterval per key, with
// the number of warnings held back since the last one (suppressed).
func (b *Budget) trusted(job string, rec Record) Record {
	if f := b.o.limits; f != nil {
		if total, perItem, ok := f(job); ok && (rec.Total != total || rec.PerItemMax != perItem) {
			if suppressed, ok := b.tamperWarn.allow(job); ok {
				b.log.Warn().Str("job_id", job).Int("stored_total", rec.Total).Int("total", total).
					Int("stored_per_item_max", rec.PerItemMax).Int("per_item_max", perItem).Int("suppressed", suppressed).
					Msg("budget record's limits are not the job's; using the job's")
			}
			rec.Total, rec.PerItemMax = total, perItem
		}
	}
	rec.Consumed = max(rec.Consumed, 0)
	rec.Exhausted = rec.Consumed >= rec.Total
	return rec
}

// trustedEntry is trusted applied to a stored entry.
func (b *Budget) trustedEntry(job string, e kvstate.Entry[Record]) kvstate.Entry[Record] {
	if e.Exists {
		e.Value = b.trusted(job, e.Value)
	}
	return e
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
// units as there are waiters with one compare-and-set (kvstate's Update,
// which retries conflicts and failed requests until the Budget closes), and
// hands the recorded units out. It runs in one goroutine per job at a time.
func (b *Budget) flush(st *jobState) {
	var batch []*waiter
	for {
		e, _, known := b.store.Cached(st.job)
		e = b.trustedEntry(st.job, e)
		st.mu.Lock()
		batch = st.settleLocked(append(batch, st.pending...), e, known)
		st.pending = nil
		if len(batch) == 0 || b.ctx.Err() != nil {
			for _, w := range batch {
				w.resolve(Grant{}, ErrClosed)
			}
			st.flushing = false
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()

		want := len(batch)
		units := map[string]int{} // by write id: a lost reply's write may be an earlier round's
		c, err := b.store.Update(b.ctx, st.job, func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
			if !cur.Exists {
				return Record{}, false, fmt.Errorf("%w: job %s", ErrNotFound, st.job)
			}
			cur = b.trustedEntry(st.job, cur)
			n := min(want, cur.Value.Remaining())
			if n <= 0 {
				return cur.Value, false, nil // exhausted: the next settle denies
			}
			units[id] = n
			return cur.Value.consume(n, id), true, nil
		})
		switch {
		case err != nil:
			batch = b.fail(st, batch, err)
		case c.Written:
			n := units[c.Writer]
			b.m.consumed.Add(float64(n))
			st.mu.Lock()
			st.surplus += n
			st.mu.Unlock()
			if rec := c.To.Value; rec.Remaining() == 0 {
				b.m.exhausted.WithLabelValues(ScopeJob).Inc()
				b.log.Info().Str("job_id", st.job).Int("consumed", rec.Consumed).Int("limit", rec.Total).Msg("job retry budget exhausted")
			}
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
func (st *jobState) settleLocked(batch []*waiter, e kvstate.Entry[Record], known bool) []*waiter {
	live := batch[:0]
	for _, w := range batch {
		if w.state.Load() != waiting {
			continue // gave up
		}
		if g, ok := st.decideLocked(e, known, w.itemRetries); ok {
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
