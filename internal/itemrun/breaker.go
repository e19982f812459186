package itemrun

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/breaker"
	"github.com/jetfleet/jetfleet/internal/failure"
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
// settleBreaker applies its outcome. The states are shared through
// internal/breaker's Gate: a state change is written with compare-and-set,
// so concurrent agents never both take the last half-open probe.

// breakerErrorDelay is how long an item waits when the breaker state
// cannot be read or written.
const breakerErrorDelay = time.Second

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
		if a.writeLocal(it) {
			_ = it.m.Nak() // shutdown: back unspent, as for a cancelled step
		}
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
		log(a.log.Warn()).Str("breaker", breaker.StateName(to)).Msg("circuit breaker refused the item on the consumer's last delivery: running it anyway")
		return true
	}
	d := failure.ParkDelay(retryAt.Sub(now), a.cfg.hooks.Rand.Float64())
	a.metrics.breakerParked.Inc()
	log(a.log.Debug()).Str("breaker", breaker.StateName(to)).Dur("delay", d).Msg("parked by the circuit breaker")
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
	a.log.Debug().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("step", i).Str("breaker", breaker.StateName(to)).
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
	fromName, toName := breaker.StateName(from), breaker.StateName(to)
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

// openBreakers waits for the breaker bucket and returns the agent's gate.
func (a *Agent) openBreakers(ctx context.Context) (breakerStates, error) {
	kv, err := a.waitKV(ctx, a.names.BreakerBucket())
	if err != nil {
		return nil, err
	}
	g, err := breaker.NewGate(a.js, kv, a.cfg.Pool, a.cfg.hooks.Clock, a.log, a.breakerChanged, a.releaseSoon)
	if err != nil {
		return nil, err
	}
	return gateStates{g}, nil
}

// gateStates is the agent's breakerStates: the pool's breaker.Gate.
type gateStates struct{ g *breaker.Gate }

func (s gateStates) update(ctx context.Context, job string, fn func(time.Time, retry.BreakerState) retry.BreakerState) (from, to retry.BreakerState, err error) {
	return s.g.Update(ctx, job, fn)
}

func (s gateStates) forget(job string) { s.g.Forget(job) }

func (s gateStates) close() { s.g.Close() }
