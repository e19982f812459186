package itemrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The fleet-wide circuit breaker (error_policy.circuit_breaker). A job's
// breaker state is the value of its key in the breaker bucket, <pool>.<job>
// (JSON of retry.BreakerState; a missing key is a closed breaker): the
// agents of a pool share it, and the server lets them write their own
// pool's keys only, so no other pool's agent can open or close it. Every agent
// follows it: before a delivery runs, admitBreaker asks retry.Breaker.Admit
// and parks the item when it is refused (breakerPark); after it ran,
// recordBreaker applies OnFailure or OnSuccess. A state change is written
// with compare-and-set, so concurrent agents never both take the last
// half-open probe.

// Bounds of the breaker's KV traffic.
const (
	// breakerOpTimeout bounds one KV request.
	breakerOpTimeout = 5 * time.Second
	// breakerUpdateTimeout bounds one update, its conflicts and retried
	// failures included.
	breakerUpdateTimeout = 10 * time.Second
	// breakerMaxRounds bounds the compare-and-set rounds of one update.
	breakerMaxRounds = 200
	// breakerErrorDelay is how long an item waits when the breaker state
	// cannot be read or written.
	breakerErrorDelay = time.Second
)

// breakerBackoff spaces an update's compare-and-set rounds: 1ms doubling
// to 50ms, each delay jittered by ±50 %.
var breakerBackoff = retry.Exponential(time.Millisecond, 50*time.Millisecond).WithJitter(messages.JitterProportional, 0.5)

// breakerRecord is the stored value: the state plus the id of the write
// that stored it, by which a writer whose reply was lost recognises its
// own write.
type breakerRecord struct {
	retry.BreakerState
	Writer string `json:"writer,omitempty"`
}

// breakerTicket is what a delivery of a job with a breaker carries from
// admission to its outcome.
type breakerTicket struct {
	b *retry.Breaker
	// t says whether the delivery is a half-open probe, and of which period.
	t retry.Ticket
	// done: the delivery's outcome has been recorded (at most one).
	done bool
}

// jobBreaker is the job's circuit breaker (compiled with its error
// policy) for a delivery: nil when it has none, and for the reduce item,
// which concludes the job rather than calling what the breaker protects.
func jobBreaker(it *item) *retry.Breaker {
	if it.job.workflow == nil || it.wi.Phase != "" {
		return nil
	}
	return it.job.workflow.Breaker()
}

// admitBreaker lets a delivery of a job with a circuit breaker run, or
// parks it (breakerPark). It reports whether the caller may run the item's
// steps; when not, the message has been parked, naked with a delay, or
// left to AckWait. A parked item spends no attempt and no budget.
func (a *Agent) admitBreaker(ctx context.Context, it *item) bool {
	b := jobBreaker(it)
	if b == nil {
		return true
	}
	it.breaker = breakerTicket{b: b}
	var (
		admitted bool
		now      time.Time
		retryAt  time.Time
	)
	_, to, err := a.breakers.update(ctx, it.wi.JobID, func(t time.Time, st retry.BreakerState) retry.BreakerState {
		var next retry.BreakerState
		next, admitted, retryAt = b.Admit(t, st)
		now = t
		return next
	})
	// Fields added per event: no logger is built on the closed fast path.
	log := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Uint64("num_delivered", it.md.NumDelivered)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		_ = it.m.Nak() // shutdown: back unspent, as for a cancelled step
		return false
	case err != nil:
		if a.lastDelivery(it) {
			log(a.log.Warn()).Err(err).Msg("circuit breaker state unavailable on the consumer's last delivery: running the item rather than stranding it")
			return true
		}
		log(a.log.Warn()).Err(err).Dur("delay", breakerErrorDelay).Msg("circuit breaker state unavailable; retrying later")
		a.nakDelay(it, breakerErrorDelay)
		return false
	case admitted:
		if it.breaker.t = retry.TicketOf(to); it.breaker.t.Probe {
			log(a.log.Debug()).Int("probes", to.Probes).Msg("admitted as a half-open circuit breaker probe")
		}
		return true
	case a.lastDelivery(it):
		// Parking now would leave the message to the advisory mover with
		// no outcome of its own: run it, outside the breaker's count.
		log(a.log.Warn()).Str("breaker", breakerStateName(to)).Msg("circuit breaker refused the item on the consumer's last delivery: running it anyway")
		return true
	}
	d := failure.ParkDelay(retryAt.Sub(now), a.cfg.hooks.Rand.Float64())
	a.metrics.breakerParked.Inc()
	log(a.log.Debug()).Str("breaker", breakerStateName(to)).Dur("delay", d).Msg("parked by the circuit breaker")
	a.breakerPark(ctx, it, d)
	return false
}

// breakerPark makes a refused delivery wait d. A long wait is parked in
// the park stream like a long retry (park.go), so that the items of a job
// whose breaker stays open do not fill the consumer's ack-pending window
// and freeze its pool: the item's state records the park and nothing else
// (no attempt, no budget). A short wait, or a state that cannot be saved,
// is a delayed nak.
func (a *Agent) breakerPark(ctx context.Context, it *item, d time.Duration) {
	if !a.parks(d) {
		a.nakDelay(it, d)
		return
	}
	a.markPark(it, d)
	it.breakerParked = true
	switch saved, fenced := a.persist(ctx, it); {
	case saved:
		a.park(ctx, it)
	case !fenced:
		a.nakDelay(it, d)
	}
}

// settleBreaker records the breaker outcome of a delivery that ran: at its
// first failed step run, a failure of the dependency or one that says
// nothing about it (ignored: the item's own fault, or a snooze); success
// when it ran without one. Only the first call of a delivery counts. While
// half-open only the outcomes of that period's probes count: an item
// admitted before the breaker opened (or run on its last delivery) says
// nothing about the recovery, and an ignored probe frees its slot.
func (a *Agent) settleBreaker(ctx context.Context, it *item, o retry.Outcome) {
	a.settle(ctx, it, &it.breaker, it.wi.JobID, o)
}

// settle records outcome o on the ticket's breaker, stored under key, once
// per ticket (nothing for a zero ticket: no breaker).
func (a *Agent) settle(ctx context.Context, it *item, t *breakerTicket, key string, o retry.Outcome) {
	if t.b == nil || t.done {
		return
	}
	t.done = true
	_, _, err := a.breakers.update(ctx, key, func(now time.Time, st retry.BreakerState) retry.BreakerState {
		return t.b.Settle(now, st, t.t, o)
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Str("breaker", key).Str("outcome", outcomeName(o)).
			Msg("circuit breaker outcome not recorded")
	}
}

// outcomeName names a breaker outcome in logs.
func outcomeName(o retry.Outcome) string {
	switch o {
	case retry.OutcomeSuccess:
		return "success"
	case retry.OutcomeFailure:
		return "failure"
	}
	return "ignored"
}

// A step's own circuit breaker (retry_config.circuit_breaker) is shared by
// the pool's agents the same way, in the same bucket, under the key
// <pool>.<job>.<step>
// (the step's 0-based index in agent_template). Before each run of the
// step the agent asks it; refused, the step fails fast (circuit_open)
// without running, and its on_failure applies. Every run's outcome is
// recorded.

// stepBreakerKey is the breaker bucket's key of step i's own breaker.
func stepBreakerKey(job string, i int) string { return job + "." + strconv.Itoa(i) }

// admitStepBreaker asks step i's own circuit breaker whether it may run
// now, and reports false when it refuses. When its state cannot be read or
// written the step runs (the breaker fails open) outside its count.
func (a *Agent) admitStepBreaker(ctx context.Context, it *item, i int) bool {
	it.stepBreaker = breakerTicket{}
	b := it.set.policies[i].Breaker()
	if b == nil || it.wi.Phase != "" {
		return true
	}
	var admitted bool
	_, to, err := a.breakers.update(ctx, stepBreakerKey(it.wi.JobID, i), func(t time.Time, st retry.BreakerState) retry.BreakerState {
		var next retry.BreakerState
		next, admitted, _ = b.Admit(t, st)
		return next
	})
	switch {
	case err != nil:
		if ctx.Err() == nil {
			a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("step", i).
				Msg("step circuit breaker state unavailable: running the step")
		}
		return true
	case admitted:
		it.stepBreaker = breakerTicket{b: b, t: retry.TicketOf(to)}
		return true
	}
	a.metrics.breakerFailedFast.Inc()
	a.log.Debug().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("step", i).Str("breaker", breakerStateName(to)).
		Msg("step circuit breaker refused the run: failing fast")
	return false
}

// settleStepBreaker records the outcome of a run of the current step with
// its own breaker (once per run; nothing for a step without one).
func (a *Agent) settleStepBreaker(ctx context.Context, it *item, o retry.Outcome) {
	if it.stepBreaker.b == nil {
		return // no breaker: not even its key is needed (a string per item)
	}
	a.settle(ctx, it, &it.stepBreaker, stepBreakerKey(it.wi.JobID, it.st.Step), o)
}

// breakerChanged publishes CircuitBreakerStateChanged and counts the
// transition; called by the agent whose write changed the state. key is
// the job's key, or <job>.<step> for a step's own breaker.
func (a *Agent) breakerChanged(key string, from, to retry.BreakerState) {
	job, stepKey, isStep := strings.Cut(key, ".")
	var step *int
	stepName := ""
	if isStep {
		if i, err := strconv.Atoi(stepKey); err == nil {
			step = &i
			if a.jobs != nil {
				if j, err := a.jobs.get(context.Background(), job); err == nil && i < len(j.mapSteps.steps) {
					stepName = j.mapSteps.stepName(i) // cached: the job's items are running
				}
			}
		}
	}
	fromName, toName := breakerStateName(from), breakerStateName(to)
	a.metrics.breakerTransitions.WithLabelValues(toName).Inc()
	// The counts that decided the transition: the new state has reset them.
	failures, successes, probes := to.Failures, to.Successes, to.Probes
	switch {
	case to.Is(retry.CircuitOpen):
		failures = from.Failures + 1
		successes, probes = from.Successes, from.Probes
	case to.Is(retry.CircuitClosed) && from.Is(retry.CircuitHalfOpen):
		successes, probes = from.Successes+1, max(from.Probes-1, 0)
	}
	a.log.Info().Str("job_id", job).Str("step", stepName).Str("from", fromName).Str("to", toName).Int("failures", failures).
		Int("successes", successes).Int("probes", probes).Msg("circuit breaker state changed")
	a.event(job, messages.EventBreaker, messages.EventTypeBreakerChanged, messages.BreakerChangedEvent{
		JobID: job, Step: step, StepName: stepName, From: fromName, To: toName, Failures: failures, Successes: successes, Probes: probes,
		Agent: a.cfg.Name, OpenedAt: to.OpenedAt, // open and half-open: when it (last) opened
	})
}

// breakerStateName is the state's name, "closed" for the zero state.
func breakerStateName(st retry.BreakerState) string {
	if st.State == "" {
		return retry.CircuitClosed
	}
	return st.State
}

// openBreakers waits for the breaker bucket and returns the agent's gate.
func (a *Agent) openBreakers(ctx context.Context) (*breakerGate, error) {
	kv, err := a.waitKV(ctx, a.names.BreakerBucket())
	if err != nil {
		return nil, err
	}
	return newBreakerGate(a.js, kv, a.cfg.Pool, a.cfg.hooks.Clock, a.log, a.breakerChanged, a.releaseSoon)
}

// breakerGate reads and writes jobs' breaker states in the breaker bucket,
// under its pool's keys (<pool>.<job>, <pool>.<job>.<step>: the gate adds
// the pool), through a kvstate.Store: each job's state is cached and kept fresh by a
// watch of the bucket, so that a closed breaker costs no request (a
// delivery reads the cache), and only a change of state is written, with
// compare-and-set against the revision it was computed from; reads go to
// the stream leader. A breakerGate is safe for concurrent use; close stops
// it.
type breakerGate struct {
	store    *kvstate.Store[breakerRecord]
	pool     string
	clock    clock.Clock
	onChange func(job string, from, to retry.BreakerState)
	// onClosed is called, without blocking, when a job's breaker is seen
	// to close (written, read or watched) after it was seen open or
	// half-open: the items it parked are released (release.go).
	onClosed func(job string)

	mu   sync.Mutex
	seen map[string]string // key → state name last seen
}

func newBreakerGate(js jetstream.JetStream, kv jetstream.KeyValue, pool string, clk clock.Clock, log zerolog.Logger,
	onChange func(job string, from, to retry.BreakerState), onClosed func(job string)) (*breakerGate, error) {
	log = log.With().Str("component", "breaker").Logger()
	g := &breakerGate{pool: pool, clock: clk, onChange: onChange, onClosed: onClosed, seen: map[string]string{}}
	store, err := kvstate.New(kvstate.Config[breakerRecord]{
		Observe:   g.observe,
		KV:        kv,
		JetStream: js,
		Watch:     true, // a closed breaker is admitted from the cache
		Decode: func(data []byte) (breakerRecord, error) {
			var rec breakerRecord
			if err := json.Unmarshal(data, &rec); err != nil {
				// A corrupt value reads as closed; the next write replaces it.
				log.Warn().Err(err).Msg("corrupt circuit breaker state read as closed")
				return breakerRecord{}, nil
			}
			return rec, nil
		},
		WrittenBy:       func(rec breakerRecord, id string) bool { return rec.Writer == id },
		OpTimeout:       breakerOpTimeout,
		ConflictBackoff: breakerBackoff,
		ErrorBackoff:    breakerBackoff,
		MaxRounds:       breakerMaxRounds,
		MaxKeys:         4096, // jobs are few; bound the cache anyway
		Logger:          log,
	})
	if err != nil {
		return nil, err
	}
	g.store = store
	return g, nil
}

// observe follows the state of the gate's job breakers (not the steps':
// a step breaker fails its step fast and parks nothing) and calls
// onClosed when one closes, or its key is deleted, after it was seen open
// or half-open. It runs under the store's lock: quick, no store calls.
func (g *breakerGate) observe(key string, e kvstate.Entry[breakerRecord]) {
	job, ok := strings.CutPrefix(key, g.pool+".")
	if !ok || strings.Contains(job, ".") {
		return
	}
	state := retry.CircuitClosed
	if e.Exists {
		state = breakerStateName(e.Value.BreakerState)
	}
	g.mu.Lock()
	prev, known := g.seen[key]
	if !known && len(g.seen) >= 4096 {
		clear(g.seen) // as the store's cache: jobs are few, bound it anyway
	}
	g.seen[key] = state
	g.mu.Unlock()
	if known && prev != retry.CircuitClosed && state == retry.CircuitClosed && g.onClosed != nil {
		g.onClosed(job)
	}
}

// close stops the watch and waits for it. It is idempotent.
func (g *breakerGate) close() { g.store.Close() }

// forget drops the cached states of a job's breakers (its own and its
// steps'); the next delivery reads them from KV. An update under way keeps
// its entry: compare-and-set keeps both correct.
func (g *breakerGate) forget(job string) {
	g.mu.Lock()
	delete(g.seen, g.key(job))
	g.mu.Unlock()
	g.store.Forget(g.key(job))
	g.store.ForgetPrefix(g.key(job) + ".")
}

// key is the bucket key of a breaker of the gate's pool: <pool>.<k>, k
// being a job id or <job>.<step>.
func (g *breakerGate) key(k string) string { return g.pool + "." + k }

// update applies fn to the job's current state and stores the result if it
// differs, by compare-and-set; a conflict re-reads from the stream leader
// and applies fn again. It returns the state fn was last applied to and
// its result, which is stored (or was already so). fn may be called more
// than once and must not keep what it computed in earlier calls. A write
// whose reply was lost and whose state another agent has overwritten since
// is decided again: a probe slot it took is then written off after the
// timeout, never granted twice. Conflicts and transient failures are
// retried for at most breakerUpdateTimeout.
func (g *breakerGate) update(ctx context.Context, job string,
	fn func(now time.Time, st retry.BreakerState) retry.BreakerState) (from, to retry.BreakerState, err error) {
	ctx, cancel := context.WithTimeout(ctx, breakerUpdateTimeout)
	defer cancel()
	c, err := g.store.Update(ctx, g.key(job), func(cur kvstate.Entry[breakerRecord], id string) (breakerRecord, bool, error) {
		st := cur.Value.BreakerState
		next := fn(g.clock.Now().Round(0), st) // no monotonic reading: it is stored
		return breakerRecord{BreakerState: next, Writer: id}, !sameBreakerState(next, st), nil
	})
	if err != nil {
		return from, from, fmt.Errorf("agent: breaker %s: %w", job, err)
	}
	from, to = c.From.Value.BreakerState, c.To.Value.BreakerState
	if c.Written && breakerStateName(from) != breakerStateName(to) && g.onChange != nil {
		g.onChange(job, from, to)
	}
	return from, to, nil
}

// sameBreakerState compares states by value, times by instant.
func sameBreakerState(a, b retry.BreakerState) bool {
	return breakerStateName(a) == breakerStateName(b) && a.Failures == b.Failures && a.Probes == b.Probes &&
		a.Successes == b.Successes && a.OpenedAt.Equal(b.OpenedAt) && a.HalfOpenAt.Equal(b.HalfOpenAt)
}
