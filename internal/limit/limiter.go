package limit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Pacing of an agent's takes.
const (
	// BatchWindow is how much of a limit's rate one take may lease for the
	// agent's waiting callers and those it expects (as many as came in the
	// last window): a take of a 10,000/s limit leases up to 100 tokens,
	// one of a limit below 200/s a single token.
	BatchWindow = 10 * time.Millisecond
	// batchTTL is how long leased tokens stay usable: tokens not used by
	// then are dropped, so that a batch never adds to a later burst. It
	// is well within the bucket's TransitMargin, which absorbs the calls
	// of tokens taken before a second that start in it.
	batchTTL = 5 * BatchWindow
	// SlotPoll is how long an agent waits before asking again for a slot
	// of a full limit, unless one of its own calls releases one first.
	// Each ask reads the record: another agent's release is seen within it.
	SlotPoll = 25 * time.Millisecond
	// handoffFresh is how recent the agent's view of a limit must be for a
	// finished call to hand its slot to a call of the agent's own waiting
	// on the limit: an older view may miss another agent waiting, and the
	// slot then goes back through the limit (which refreshes the view).
	handoffFresh = WaiterTTL / 2
	// releaseTimeout bounds a release, which runs even after the call's
	// context has ended.
	releaseTimeout = 5 * time.Second
	// spareIdle is how long the agent keeps spare slots that none of its
	// callers takes before it gives them back to the limit.
	spareIdle = batchTTL
)

// Limiter is an agent's side of the fleet's limits: it takes tokens and
// slots from the store for the agent's calls, one take at a time per
// limit (and one more in the background that refills leased tokens),
// leasing tokens in batches for the callers waiting on it and those
// expected, and makes a refused caller wait in process (up to its
// maxWait) without asking KV again before a token can have accrued or a
// slot been freed. It is safe for concurrent use.
type Limiter struct {
	store   *Store
	agent   string
	clock   clock.Clock
	metrics *Metrics

	mu   sync.Mutex
	keys map[string]*local
	// wakers holds the same entries as keys, for the store's listener,
	// which runs under the store's lock and so must not take mu (held
	// while waiting for lk.mu, which is held across a take).
	wakers sync.Map
	// bg counts the writes under way in the background (refills, spare
	// slots given back), which Close waits for; returning is held for
	// reading by each return of spare slots (returnSpare, also from their
	// timers), and for writing by Close to wait for those under way.
	bg        sync.WaitGroup
	returning sync.RWMutex
}

// local is one limit's state in the agent.
type local struct {
	mu sync.Mutex // held across a caller's take: one at a time per limit (a background refill does not hold it)
	// waiting callers (the batch a take asks for).
	waiting int
	// tokens leased by the last take for other callers, usable until
	// expires.
	tokens  int
	expires time.Time
	// unused are leased tokens no caller used (expired, or held without a
	// slot to use them with: Limiter.unusable), to give back to the limit
	// with the agent's next write of it (Record.GiveBack), so that the
	// record counts calls, not tokens leased.
	unused int
	// notBefore: a take was refused; none is asked before then.
	notBefore time.Time
	// demand counts the callers that entered Acquire in the BatchWindow
	// from demandAt, lastDemand those of the window before: a take leases
	// tokens for the callers expected in the next window too, so that a
	// steady stream of calls finds tokens leased instead of each waiting
	// for a take.
	demand, lastDemand int
	demandAt           time.Time
	// batch is how many tokens the last take leased; refilling is set
	// while a take runs in the background for the callers to come.
	batch     int
	refilling bool
	// latency is a moving average of the takes' round trips: a batch
	// leases tokens for the callers expected until the next take can land
	// (lookahead).
	latency time.Duration
	// rate is the limit's rate at the last take; capped that it has a
	// concurrency cap (each call then takes its own slot, and no batch).
	rate     float64
	capped   bool
	adaptive bool
	// spare are slots the agent holds for its callers: handed over by a
	// finished call to the callers waiting here, leased with a take for
	// the callers expected (Request.Extra), or kept by a finished call
	// while the limit is roomy (Release). Spare slots unused for
	// spareIdle go back to the limit in one write (returnSpare), and at
	// once when another agent is seen waiting.
	spare int
	// spareUsed is when a spare slot was last taken or kept (system
	// clock); spareTimer, when set, returns the spare slots once idle;
	// lease is the callers' lease, for that release.
	spareUsed  time.Time
	spareTimer *time.Timer
	lease      time.Duration
	// returning is set while a return of the spare slots is on its way.
	returning atomic.Bool
	// wake is closed (and replaced) when a slot or a token may have
	// become free: one of the agent's calls released a slot, or a record
	// read or written shows one. kicked tells the next waiter to forget
	// notBefore.
	wmu    sync.Mutex
	wake   chan struct{}
	kicked atomic.Bool
	// seen is when a newer record of the limit was last seen (Unix
	// nanoseconds of the store's clock), and last is that record: a
	// release hands its slot over on it while it is recent, even after a
	// refused take made the store forget its cached copy.
	seen atomic.Int64
	last atomic.Pointer[Record]
	// users counts the callers in Acquire (the entry is dropped at 0,
	// when it holds no spare slot nor unexpired token); dropped is set
	// then: a call that ends keeps no slot in it.
	users   int
	dropped bool
}

// NewLimiter returns the limiter of agent (its id: where its slots are
// leased). metrics may be nil.
func NewLimiter(store *Store, agent string, clk clock.Clock, metrics *Metrics) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	l := &Limiter{store: store, agent: agent, clock: clk, metrics: metrics, keys: map[string]*local{}}
	store.listen(l.changed)
	return l
}

// changed hears a newer record of key read or written by the agent: when
// it has a slot and a token free, the callers waiting on it here try again
// at once rather than at their next poll.
func (l *Limiter) changed(key string, r Record) {
	v, ok := l.wakers.Load(key)
	if !ok {
		return
	}
	now := l.store.Now()
	lk := v.(*local)
	lk.last.Store(&r)
	lk.seen.Store(now.UnixNano())
	if r.held(now, l.agent) > 0 && (r.OthersWaiting(now, l.agent) || r.Roomy(now) < 0) && lk.returning.CompareAndSwap(false, true) {
		// Another agent waits, or the limit filled up: the slots this
		// agent holds for its callers to come go back now.
		l.bg.Go(func() { l.returnSpare(key, lk, true) })
	}
	if r.Concurrency > 0 && r.InFlight(now) >= r.Concurrency {
		return
	}
	if r.LimitConfig.Rate > 0 && r.TokensAt(now) < 1 {
		return
	}
	lk.kick()
}

// kick wakes the callers waiting on lk.
func (lk *local) kick() {
	lk.kicked.Store(true)
	lk.wmu.Lock()
	close(lk.wake)
	lk.wake = make(chan struct{})
	lk.wmu.Unlock()
}

// waker is the channel that the next kick closes.
func (lk *local) waker() <-chan struct{} {
	lk.wmu.Lock()
	defer lk.wmu.Unlock()
	return lk.wake
}

// Ticket is a call's hold on a limit, from Acquire to Release.
type Ticket struct {
	key, label string
	slot       bool
	adaptive   bool
	lease      time.Duration
	released   bool
}

// Acquire is what a call asks of a limit.
type Acquire struct {
	// Key is the limit's key in the bucket (NamedKey, InlineKey).
	Key string
	// Label names the limit in metrics: the limit's name, or "inline".
	Label string
	// Pool is the caller's pool (a named limit of another pool refuses).
	Pool string
	// Inline is the step's configuration of an inline limit; nil for a
	// named limit.
	Inline *messages.LimitConfig
	// Lease is how long the call's slot stays held if the agent dies:
	// the step's timeout and a margin.
	Lease time.Duration
	// MaxWait is how long the caller may wait in process.
	MaxWait time.Duration
}

// Acquire takes a token and, for a limit with a concurrency cap, a slot.
// It returns the ticket, or, when none came within MaxWait, nil and how
// long the caller should wait before asking again (it holds nothing
// meanwhile). ctx ending returns its error.
func (l *Limiter) Acquire(ctx context.Context, q Acquire) (*Ticket, time.Duration, error) {
	lk := l.enter(q.Key)
	defer l.leave(q.Key, lk)
	start, realStart := l.clock.Now(), time.Now()
	lk.mu.Lock()
	lk.waiting++
	switch since := start.Sub(lk.demandAt); {
	case since >= 2*BatchWindow:
		lk.demand, lk.lastDemand, lk.demandAt = 0, 0, start
	case since >= BatchWindow:
		lk.demand, lk.lastDemand, lk.demandAt = 0, lk.demand, lk.demandAt.Add(BatchWindow)
	}
	lk.demand++
	lk.mu.Unlock()
	defer l.done(ctx, q, lk)
	waited := false
	for {
		lk.mu.Lock()
		if lk.kicked.Swap(false) {
			lk.notBefore = time.Time{}
		}
		now := l.clock.Now()
		var wait time.Duration
		spare := lk.spare > 0
		leased := lk.tokens > 0 && now.Before(lk.expires)
		switch {
		case !lk.capped && !spare && leased:
			// A token the last take leased in its batch: no request. A
			// limit without a cap holds no slot.
			lk.tokens--
			l.refillAhead(q, lk)
			lk.mu.Unlock()
			l.metrics.granted(q.Label, waited)
			return &Ticket{key: q.Key, label: q.Label, lease: q.Lease}, 0, nil
		case spare && (lk.rate == 0 || leased):
			// A slot the agent holds for its callers, and a leased token
			// when the limit has a rate: no request at all.
			lk.spare--
			lk.spareUsed = time.Now()
			if lk.rate > 0 {
				lk.tokens--
				l.refillAhead(q, lk)
			}
			adaptive := lk.adaptive
			lk.mu.Unlock()
			l.metrics.granted(q.Label, waited)
			return &Ticket{key: q.Key, label: q.Label, slot: true, adaptive: adaptive, lease: q.Lease}, 0, nil
		case (spare || !lk.capped) && lk.refilling:
			// The leased tokens ran out while a refill is on its way: wait
			// for it (it wakes the callers when it lands) rather than race
			// it with a take of the same record. Like a take in flight, it
			// is not bounded by MaxWait.
			wake := lk.waker()
			lk.mu.Unlock()
			waited = true
			if err := sleepOrWake(ctx, releaseTimeout, wake); err != nil {
				return nil, 0, err
			}
			continue
		case now.Before(lk.notBefore):
			wait = lk.notBefore.Sub(now)
		default:
			batch := 1
			if lk.rate > 0 {
				batch = lk.batchSize()
			}
			// Tokens leased before that no caller can use go back with
			// this take (none is lost if it fails: never given back twice).
			unused := lk.unusable(now)
			// With a spare slot only tokens are asked for; without one, a
			// slot and more for the callers expected (granted while the
			// limit is roomy).
			extra := 0
			if lk.capped && !spare {
				extra = lk.demandAhead() - 1
			}
			took := time.Now()
			g, rec, err := l.store.Take(ctx, q.Key, q.Pool, q.Inline, Request{Agent: l.agent, Tokens: batch, Slot: !spare, Lease: q.Lease, More: lk.waiting > 1, Extra: extra, Return: unused})
			lk.observe(time.Since(took))
			l.metrics.take(q.Label)
			if err != nil {
				lk.mu.Unlock()
				return nil, 0, err
			}
			lk.rate, lk.capped, lk.adaptive = rec.Rate(), rec.Concurrency > 0, rec.Adaptive
			l.metrics.rate(q.Label, rec, q.Inline == nil)
			if g.Granted() {
				slot := g.Slot
				if spare {
					lk.spare--
					slot = true
				}
				lk.tokens, lk.expires, lk.batch = g.Tokens-1, l.clock.Now().Add(batchTTL), g.Tokens // usable from the grant on
				if g.Extra > 0 {
					lk.spare += g.Extra
					l.keepSpare(q.Key, lk, q.Lease)
				}
				lk.mu.Unlock()
				l.metrics.granted(q.Label, waited)
				return &Ticket{key: q.Key, label: q.Label, slot: slot, adaptive: rec.Adaptive, lease: q.Lease}, 0, nil
			}
			wait = g.Wait
			if g.Full {
				wait = SlotPoll
				if now.Sub(time.Unix(0, lk.seen.Load())) > SlotPoll {
					// Decided on a view other agents' releases may have
					// left behind: the next take reads the record.
					l.store.reread(q.Key)
				}
			}
			lk.notBefore = now.Add(wait)
		}
		lk.mu.Unlock()
		wake := lk.waker()
		if now.Add(wait).Sub(start) > q.MaxWait || time.Since(realStart)+wait > q.MaxWait {
			l.metrics.deferred(q.Label)
			return nil, max(wait, time.Millisecond), nil
		}
		waited = true
		if err := sleepOrWake(ctx, wait, wake); err != nil {
			return nil, 0, err
		}
	}
}

// sleepOrWake waits d, or until wake is closed; ctx ending returns its
// error.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-wake:
	}
	return nil
}

// refillAhead starts a take in the background when the tokens leased for
// the agent's callers fall below half of the last batch, so that a steady
// stream of calls finds tokens leased rather than waits for a take's round
// trip. Only for a limit with a rate. lk.mu is held.
func (l *Limiter) refillAhead(q Acquire, lk *local) {
	if lk.refilling || lk.rate <= 0 || lk.tokens*2 >= lk.batch {
		return
	}
	n := lk.batchSize()
	lk.refilling = true
	unused := lk.unusable(l.clock.Now())
	l.bg.Go(func() { l.refill(q, lk, n, unused) })
}

// unusable takes out the leased tokens that no caller can use, with those
// set aside before (lk.unused), for the caller to give back in its next
// write of the limit: expired ones, and, for a limit with a cap, every one
// while the agent holds no spare slot (a call needs a slot with its token,
// and a take of a slot brings its own). lk.mu is held.
func (lk *local) unusable(now time.Time) int {
	if lk.tokens > 0 && (!now.Before(lk.expires) || lk.capped && lk.spare == 0) {
		lk.unused += lk.tokens
		lk.tokens = 0
	}
	n := lk.unused
	lk.unused = 0
	return n
}

// batchSize is how many tokens a take leases: one for each caller waiting
// and for each expected before another take could land (the callers of
// the last BatchWindow, scaled to twice the takes' round trip, within
// batchTTL), at most the limit's rate over BatchWindow or over a take's
// round trip if longer (within batchTTL): an agent does not lease the
// tokens of a limit that binds for long, and one take at a time can still
// carry the whole rate when KV is slow. lk.mu is held.
func (lk *local) batchSize() int {
	span := min(max(lk.latency, BatchWindow), batchTTL)
	return max(1, min(lk.demandAhead(), int(math.Floor(lk.rate*span.Seconds()))))
}

// demandAhead is how many callers a take serves: those waiting and those
// expected before another take could land (the callers of the last
// BatchWindow, scaled to twice the takes' round trip, within batchTTL).
// lk.mu is held.
func (lk *local) demandAhead() int {
	ahead := min(max(2*lk.latency, BatchWindow), batchTTL)
	expected := int(math.Ceil(float64(lk.lastDemand) * float64(ahead) / float64(BatchWindow)))
	return max(1, lk.waiting+expected)
}

// observe adds a take's round trip d to the moving average. lk.mu is held.
func (lk *local) observe(d time.Duration) {
	if lk.latency == 0 {
		lk.latency = d
		return
	}
	lk.latency += (d - lk.latency) / 4
}

// refill takes n tokens for lk's callers to come and adds them to the
// lease, which it renews for batchTTL, giving back unused ones. It wakes
// the callers waiting for it whatever its outcome.
func (l *Limiter) refill(q Acquire, lk *local, n, unused int) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	took := time.Now()
	g, rec, err := l.store.Take(ctx, q.Key, q.Pool, q.Inline, Request{Agent: l.agent, Tokens: n, Lease: q.Lease, Return: unused})
	l.metrics.take(q.Label)
	lk.mu.Lock()
	lk.observe(time.Since(took))
	lk.refilling = false
	granted := err == nil && g.Granted()
	if err == nil {
		lk.rate, lk.capped, lk.adaptive = rec.Rate(), rec.Concurrency > 0, rec.Adaptive
	}
	stranded := 0
	if granted {
		now := l.clock.Now()
		if !now.Before(lk.expires) {
			lk.unused, lk.tokens = lk.unused+lk.tokens, 0
		}
		lk.tokens, lk.expires, lk.batch = lk.tokens+g.Tokens, now.Add(batchTTL), g.Tokens
		if lk.capped && lk.spare == 0 && lk.waiting == 0 {
			// The spare slots went back while the take was on its way,
			// and no caller waits to take one: its tokens go back too.
			stranded = lk.unusable(now)
		}
	}
	lk.mu.Unlock()
	lk.kick()
	if stranded > 0 {
		_ = l.store.release(ctx, q.Key, l.agent, 0, stranded, Neutral, q.Lease)
	}
}

// done ends a caller's wait on lk: the last waiter gives back the spare
// slots no waiter took.
func (l *Limiter) done(ctx context.Context, q Acquire, lk *local) {
	lk.mu.Lock()
	lk.waiting--
	n, unused := 0, 0
	if lk.waiting == 0 && lk.spare > 0 {
		if l.mayKeep(lk) {
			l.keepSpare(q.Key, lk, q.Lease) // for the callers to come
		} else {
			n, lk.spare = lk.spare, 0
			unused = lk.unusable(l.clock.Now())
		}
	}
	lk.mu.Unlock()
	if n > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		_ = l.store.release(ctx, q.Key, l.agent, n, unused, Neutral, q.Lease) // or its lease ends them
	}
}

// Release ends the ticket's call with outcome o. Its slot goes to a call
// of the agent's waiting on the same limit, if any, or back to the limit:
// without a request when the agent's view of the limit is recent and shows
// no other agent waiting with fewer slots, else in the one write that
// applies the outcome (Store.Handover), which keeps the slot for the
// waiting call unless another agent is behind. An adaptive limit hears the
// outcome. It runs even when ctx has ended (bounded by its own timeout); a
// release that fails leaves the slot to its lease's expiry. It is
// idempotent.
func (l *Limiter) Release(ctx context.Context, t *Ticket, o Outcome) error {
	if t == nil || t.released {
		return nil
	}
	t.released = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	outcome := t.adaptive && o != Neutral
	if !t.slot {
		if !outcome {
			return nil
		}
		return l.store.Release(ctx, t.key, l.agent, 0, o, t.lease)
	}
	l.mu.Lock()
	lk := l.keys[t.key]
	l.mu.Unlock()
	// lk.mu may be held across a take: not under l.mu. An entry dropped
	// meanwhile has no waiter, and the slot goes back to the limit.
	waiting := false
	if lk != nil {
		lk.mu.Lock()
		waiting = lk.waiting > 0
		lk.mu.Unlock()
	}
	if !waiting {
		kept, unused := false, 0
		if lk != nil {
			lk.mu.Lock()
			if kept = l.mayKeep(lk); kept {
				lk.spare++
				l.keepSpare(t.key, lk, t.lease)
			} else {
				unused = lk.unusable(l.clock.Now())
			}
			lk.mu.Unlock()
			if kept {
				lk.kick() // a caller may have come meanwhile
			}
		}
		switch {
		case kept && outcome:
			return l.store.Release(ctx, t.key, l.agent, 0, o, t.lease)
		case kept:
			return nil
		}
		return l.store.release(ctx, t.key, l.agent, 1, unused, o, t.lease)
	}
	// The view must be recent to hand over without a request: an older one
	// may miss another agent waiting.
	now := l.store.Now()
	rec := lk.last.Load()
	local := rec != nil && now.Sub(time.Unix(0, lk.seen.Load())) <= handoffFresh && !rec.Behind(now, l.agent)
	kept := local
	if !local {
		var err error
		if kept, err = l.store.Handover(ctx, t.key, l.agent, o, t.lease); err != nil {
			return err
		}
		outcome = false
	}
	unused := 0
	if kept {
		lk.mu.Lock()
		if lk.waiting > 0 {
			lk.spare++ // the waiter's take asks only for a token
			kept = false
		} else {
			unused = lk.unusable(l.clock.Now())
		}
		lk.mu.Unlock()
		lk.kick()
	}
	switch {
	case kept && local && outcome:
		// The waiters left meanwhile: the slot goes back after all.
		return l.store.release(ctx, t.key, l.agent, 1, unused, o, t.lease)
	case kept:
		return l.store.release(ctx, t.key, l.agent, 1, unused, Neutral, t.lease)
	case local && outcome:
		return l.store.Release(ctx, t.key, l.agent, 0, o, t.lease)
	}
	return nil
}

// enter returns key's local state, counted in use.
func (l *Limiter) enter(key string) *local {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk := l.keys[key]
	if lk == nil {
		lk = &local{wake: make(chan struct{})}
		l.keys[key] = lk
		l.wakers.Store(key, lk)
	}
	lk.users++
	return lk
}

// leave drops key's local state when no caller uses it: keys templated
// over items are many.
func (l *Limiter) leave(key string, lk *local) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk.users--; lk.users == 0 && l.keys[key] == lk {
		lk.mu.Lock()
		idle := (lk.tokens == 0 || !l.clock.Now().Before(lk.expires)) && lk.spare == 0 && lk.spareTimer == nil
		lk.dropped = idle
		lk.mu.Unlock()
		if idle {
			delete(l.keys, key)
			l.wakers.Delete(key)
		}
	}
}

// mayKeep reports whether a slot the agent holds may stay the agent's for
// its callers to come rather than go back to the limit: lk is still the
// limit's entry (a slot kept in a dropped one would be seen by no caller,
// nor by Close), the agent's view
// of the limit is recent (handoffFresh) and shows it roomy (Record.Roomy)
// with no other agent waiting. lk.mu is held.
func (l *Limiter) mayKeep(lk *local) bool {
	rec := lk.last.Load()
	now := l.store.Now()
	return !lk.dropped && rec != nil && now.Sub(time.Unix(0, lk.seen.Load())) <= handoffFresh &&
		rec.Roomy(now) >= 0 && !rec.OthersWaiting(now, l.agent)
}

// keepSpare notes that spare slots were kept or leased now, and makes sure
// a timer gives them back once they idle. lk.mu is held.
func (l *Limiter) keepSpare(key string, lk *local, lease time.Duration) {
	lk.spareUsed = time.Now()
	lk.lease = lease
	if lk.spareTimer == nil {
		lk.spareTimer = time.AfterFunc(spareIdle, func() { l.returnSpare(key, lk, false) })
	}
}

// returnSpare gives the agent's spare slots of key back to the limit in
// one write: all of them when now is set, else once none has been used
// for spareIdle (it waits again otherwise).
func (l *Limiter) returnSpare(key string, lk *local, now bool) {
	l.returning.RLock()
	defer l.returning.RUnlock()
	if now {
		defer lk.returning.Store(false)
	}
	lk.mu.Lock()
	if idle := time.Since(lk.spareUsed); !now && lk.spare > 0 && idle < spareIdle {
		lk.spareTimer.Reset(spareIdle - idle)
		lk.mu.Unlock()
		return
	}
	n, lease := lk.spare, lk.lease
	lk.spare = 0
	if lk.spareTimer != nil {
		lk.spareTimer.Stop()
		lk.spareTimer = nil
	}
	if now {
		lk.unused, lk.tokens = lk.unused+lk.tokens, 0 // all of them: the agent stops, or the limit is wanted
	}
	unused := lk.unusable(l.clock.Now())
	lk.mu.Unlock()
	if n > 0 || unused > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = l.store.release(ctx, key, l.agent, n, unused, Neutral, lease) // or their lease ends them
	}
	l.mu.Lock()
	if lk.users == 0 && l.keys[key] == lk {
		lk.mu.Lock()
		gone := lk.spare == 0 && lk.spareTimer == nil && (lk.tokens == 0 || !l.clock.Now().Before(lk.expires))
		lk.dropped = gone
		lk.mu.Unlock()
		if gone {
			delete(l.keys, key)
			l.wakers.Delete(key)
		}
	}
	l.mu.Unlock()
}

// Close waits for the takes and releases under way in the background,
// then gives the slots the agent holds for its callers, and the tokens it
// leased for them, back to their limits and stops their timers. Calls
// still running keep their slots until they release them. Safe to call
// more than once.
func (l *Limiter) Close() {
	l.bg.Wait()
	l.mu.Lock()
	keys := make(map[string]*local, len(l.keys))
	for k, lk := range l.keys {
		keys[k] = lk
	}
	l.mu.Unlock()
	for k, lk := range keys {
		l.returnSpare(k, lk, true)
	}
	l.returning.Lock() // a timer's return under way has written
	l.returning.Unlock()
}

// Metrics are the limiter's Prometheus metrics, labelled by limit name
// ("inline" for every inline limit: keys are unbounded).
type Metrics struct {
	takes     *prometheus.CounterVec
	grants    *prometheus.CounterVec
	waits     *prometheus.CounterVec
	deferrals *prometheus.CounterVec
	current   *prometheus.GaugeVec
}

// NewMetrics registers the limiter's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		takes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetfleet_limit_takes_total",
			Help: "Compare-and-set takes of a limit's tokens and slots."}, []string{"limit"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetfleet_limit_grants_total",
			Help: "Calls let through a limit."}, []string{"limit"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetfleet_limit_waited_total",
			Help: "Calls let through a limit after waiting in the agent."}, []string{"limit"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetfleet_limit_deferred_total",
			Help: "Calls sent back to wait outside the agent (delayed nak or park)."}, []string{"limit"}),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetfleet_limit_current_rate",
			Help: "A named limit's current rate per second, as last seen by this agent."}, []string{"limit"}),
	}
	if reg != nil {
		reg.MustRegister(m.takes, m.grants, m.waits, m.deferrals, m.current)
	}
	return m
}

func (m *Metrics) take(label string) {
	if m != nil {
		m.takes.WithLabelValues(label).Inc()
	}
}

func (m *Metrics) granted(label string, waited bool) {
	if m == nil {
		return
	}
	m.grants.WithLabelValues(label).Inc()
	if waited {
		m.waits.WithLabelValues(label).Inc()
	}
}

func (m *Metrics) deferred(label string) {
	if m != nil {
		m.deferrals.WithLabelValues(label).Inc()
	}
}

func (m *Metrics) rate(label string, rec Record, named bool) {
	if m != nil && named && rec.LimitConfig.Rate > 0 {
		m.current.WithLabelValues(label).Set(rec.Rate())
	}
}

// Renew extends the lease on the ticket's slot (and the agent's other
// slots of the same limit) while its call runs; nothing without a slot.
func (l *Limiter) Renew(ctx context.Context, t *Ticket) error {
	if t == nil || !t.slot || t.released {
		return nil
	}
	return l.store.Renew(ctx, t.key, l.agent, t.lease)
}

// HoldsSlot reports whether the ticket holds a concurrency slot (whose
// lease Renew extends); a ticket of a limit without a cap holds none.
func (t *Ticket) HoldsSlot() bool { return t != nil && t.slot }

// Label is the ticket's limit name in metrics and logs.
func (t *Ticket) Label() string { return t.label }
