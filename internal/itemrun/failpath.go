package itemrun

import (
	"cmp"
	"context"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The agent's failure path (docs/retries.md §1): stepFailed gathers what
// the pure verdicts of internal/failure need and asks them, then act
// carries out the end they reach, in one switch: the item state written
// with compare-and-set, then a delayed nak, or the dead letter, the
// result and Term.

// laterDelay is how long a delivery waits when the failure path cannot
// read or write what it needs (the job's retry budget, the item state).
const laterDelay = time.Second

// stepFailed is the failure path of a failed run of step i: it reports
// whether the item goes on with its next step, and that step's output.
func (a *Agent) stepFailed(ctx context.Context, it *item, i, attempt int, f *retry.Failure, dur time.Duration) (next bool, out string) {
	pol := it.set.policies[i]
	now := a.cfg.hooks.Clock.Now()
	sf := failure.StepFailure{
		Decision:     pol.Decide(now, retry.StateFromItem(&it.st), *f, a.cfg.hooks.Rand),
		Err:          f.Error(),
		LastDelivery: a.lastDelivery(it),
		Now:          now,
		Deadline:     it.deadline,
	}
	att := a.attempt(it, i, attempt, f, sf.Decision.Class, dur)
	// The delivery's first failed step run decides its breaker outcome;
	// every run decides the step's own breaker's.
	a.settleBreaker(ctx, it, sf.Breaker())
	a.settleStepBreaker(ctx, it, sf.Breaker())
	if a.failureEnds(it, i) {
		// The rest is bookkeeping: the slot goes to the next item, but only
		// once the breakers know of this failure, or the next item would
		// call a dependency they are about to shut off.
		it.freeSlot()
	}
	switch {
	case !sf.NeedsClaim():
	case it.wi.Phase == messages.PhaseSetup:
		// The job's budget is made once its items are known, after the
		// setup: the setup's retries are bounded by its steps' attempts.
		sf.Grant.Granted = true
	default:
		var ok bool
		if sf.Grant, ok = a.claim(ctx, it); !ok {
			return a.act(ctx, it, att, failure.End{Kind: failure.EndLater})
		}
	}
	return a.stepEnds(ctx, it, i, attempt, att, &sf)
}

// stepRefused is the failure path of a run of step i that did not happen:
// the step's circuit breaker refused it (circuitOpen), or the item's
// agent_timeout was up before it began. It ends as a failed run would, the
// step's retry state unchanged.
func (a *Agent) stepRefused(ctx context.Context, it *item, i, attempt int, circuitOpen bool) (next bool, out string) {
	now := a.cfg.hooks.Clock.Now()
	msg, cause := "agent_timeout passed: the step did not run", retry.ErrAgentTimeout
	if circuitOpen {
		msg, cause = "circuit breaker open: the step failed fast, without running", retry.ErrCircuitOpen
	}
	sf := failure.StepFailure{
		Decision:    retry.Decision{State: retry.StateFromItem(&it.st)},
		Err:         cause,
		NotRun:      true,
		CircuitOpen: circuitOpen,
		Now:         now,
		Deadline:    it.deadline,
	}
	att := messages.Attempt{
		Attempt: attempt, Step: i, StepName: it.set.stepName(i), Agent: a.cfg.Name, Time: now,
		ErrorClass: retry.ClassError, Message: msg, Generation: it.wi.Generation, NotRun: true,
	}
	// The delivery's outcome for the job's breaker, if it is its first
	// failed step: ignored (frees a probe's slot), as for the item's own
	// faults.
	a.settleBreaker(ctx, it, sf.Breaker())
	return a.stepEnds(ctx, it, i, attempt, att, &sf)
}

// stepEnds asks the step's verdict and acts on it: a retry or snooze, the
// item's end on its agent_timeout, or the step's give-up under its
// on_failure, then on_item_failure.
func (a *Agent) stepEnds(ctx context.Context, it *item, i, attempt int, att messages.Attempt, sf *failure.StepFailure) (next bool, out string) {
	v := sf.Verdict()
	v.State.ApplyTo(&it.st)
	class := cmp.Or(sf.Decision.Class, retry.ClassError)
	switch v.Kind {
	case failure.EndTimedOut: // the item has no time left: on_failure does not apply
		v = a.itemFailed(ctx, it, v, sf.Decision.Class)
	case failure.EndGiveUp: // its on_failure decides what follows
		fa := it.set.policies[i].OnFailure()
		var fbOut string
		var fbErr error
		if fa.NeedsFallback() {
			fbOut, fbErr = a.fallbackOutcome(ctx, it, i, attempt)
		}
		if v = v.OnFailure(fa, fbOut, fbErr); v.Kind == failure.EndGiveUp {
			v = a.itemFailed(ctx, it, v, class)
		}
	}
	return a.act(ctx, it, att, v)
}

// itemFailed is the end of an item whose step gave up (v), under the job's
// error_policy.on_item_failure: it runs what the item's verdict needs (the
// workflow's retry policy and a budget claim, or the custom step) and asks it.
func (a *Agent) itemFailed(ctx context.Context, it *item, v failure.End, class string) failure.End {
	reason, err := v.Reason, v.Err()
	// A reduce or setup item's outcome is the job's: on_item_failure does
	// not apply to it.
	f := failure.ItemFailure{Reduce: it.wi.Phase != "", Action: it.job.onItem, Reason: reason, Err: err}
	if !f.Reduce {
		switch f.Action {
		case messages.ItemFailureRetry, messages.ItemFailureDLQ:
			f.Retry = it.job.workflow.OnItemFailure(retry.ItemFailure{
				Run: max(it.st.ItemRun, 1), LastDelay: it.st.ItemDelay.D(), Err: err,
			}, retry.Counts{}, a.cfg.hooks.Rand)
		case messages.ItemFailureCustom:
			f.CustomErr = a.runCustom(ctx, it, reason, err)
		}
	}
	if f.NeedsClaim() {
		var ok bool
		if f.Grant, ok = a.claim(ctx, it); !ok {
			return failure.End{Kind: failure.EndLater}
		}
	}
	v = f.Verdict()
	v.Class = class
	return v
}

// act carries out the end of a failed step run (att is the attempt), one
// branch per end, and reports whether the item goes on with its next step.
// A retry persists the item's state before its delayed nak; a final outcome
// persists it before the dead letter, the result and Term (finalize). A
// state write that conflicts means another agent now holds the item: this
// one steps aside and leaves the message alone.
func (a *Agent) act(ctx context.Context, it *item, att messages.Attempt, e failure.End) (next bool, out string) {
	if killed(ctx) {
		// The job was cancelled with kill while the failure path ran (a
		// fallback or custom step): no retry, dead letter or result.
		a.dropKilled(it)
		return false, ""
	}
	att.Decision, att.ItemRun = string(e.Kind), itemRun(it) // the run it ended, before an item retry moves on
	a.traceDecision(it, e)
	it.failedRun = e.Kind == failure.EndRetry || e.Kind == failure.EndItemRetry || e.Kind == failure.EndGiveUp
	switch e.Kind {
	case failure.EndLater:
		a.nakDelay(it, laterDelay)
	case failure.EndContinue, failure.EndFallback:
		a.pushHistory(it, att)
		return true, e.Output
	case failure.EndRetry:
		it.st.Retries++
		a.metrics.retryDelay.Observe(e.Delay.Seconds())
		a.retryLater(ctx, it, att, e.Delay, "retry")
	case failure.EndSnooze:
		a.retryLater(ctx, it, att, e.Delay, "snooze")
	case failure.EndItemRetry:
		it.st.ItemRun = max(it.st.ItemRun, 1) + 1
		it.st.ItemDelay = messages.Duration(e.Delay)
		it.st.Step, it.st.Outputs, it.st.Captures = 0, nil, nil
		it.st.StartedAt = time.Time{} // a new run: agent_timeout counts afresh
		retry.State{}.ApplyTo(&it.st)
		it.st.Retries++
		a.retryLater(ctx, it, att, e.Delay, "item")
	case failure.EndGiveUp: // the item's end, decided (itemFailed)
		a.pushHistory(it, att)
		it.st.Final, it.st.Reason, it.st.ErrorClass = e.Outcome, e.Reason, e.Class
		if err := e.Err(); err != nil {
			it.st.Error = truncate(err.Error(), maxMessageBytes)
		}
		switch saved, fenced := a.persist(ctx, it); {
		case saved:
			a.finalize(ctx, it)
		case !fenced:
			a.nakDelay(it, laterDelay) // the give-up is decided again
		}
	}
	return false, ""
}

// retryLater records the attempt, persists the item's state and naks the
// message with delay, or parks it when the delay is long (park.go). An
// unsaved state (but not a fenced one) still naks: the next delivery
// decides from the state last saved.
func (a *Agent) retryLater(ctx context.Context, it *item, att messages.Attempt, delay time.Duration, kind string) {
	att.DelayMS = delay.Milliseconds()
	a.pushHistory(it, att)
	park := a.parks(delay)
	if park {
		a.markPark(it, delay)
	}
	if !park && a.retriesLocally(it, delay) && !a.localRetryWritesFirst(it) {
		// Short: the delay waits in the agent, and the state is written
		// when the delivery leaves it (localretry.go).
		it.unwritten = true
		r := localRetryOf(it)
		r.write = a.writeWaiting
		if a.localRetries.add(r, delay) {
			a.metrics.retries.WithLabelValues(kind).Inc()
			a.metrics.localRetries.Inc()
			return
		}
	}
	saved, fenced := a.persist(ctx, it)
	if fenced {
		return
	}
	if saved {
		a.metrics.retries.WithLabelValues(kind).Inc()
	}
	if park && saved { // long: the delay waits in the park stream, holding no slot (park.go)
		a.park(ctx, it)
		return
	}
	if saved && a.localRetryWritesFirst(it) && a.retriesLocally(it, delay) && a.localRetries.add(localRetryOf(it), delay) {
		a.metrics.localRetries.Inc() // short, its state written first
		return
	}
	if saved && a.states != nil {
		a.states.put(it.md.Sequence.Stream, cachedState{key: it.key, rev: it.rev, delivered: it.md.NumDelivered, st: it.st})
	}
	a.nakDelay(it, delay)
}

// retriesLocally reports whether the retry of it after delay runs on this
// agent (localretry.go): the delay is short, the local retries in a row
// fewer than MaxLocalRetries, and the retry is due within a third of
// AckWait of the delivery's start, so that its heartbeats begin in time.
func (a *Agent) retriesLocally(it *item, delay time.Duration) bool {
	return a.localRetries != nil && delay <= a.cfg.LocalRetryMax && it.localRetries < MaxLocalRetries &&
		a.ackWait > 0 && a.cfg.hooks.Clock.Now().Add(delay).Sub(it.reset) < a.ackWait/3
}

// localRetryWritesFirst reports whether a local retry of it writes the
// item's state before it waits, as a delayed nak does, rather than as the
// delivery leaves the agent: when the agent is told to
// (Config.LocalRetryDurable), and when the item's state carries a bound on
// time across agents (the job's agent_timeout, from the run's start; a
// step's retry_budget, from the delays spent), which an agent crash must
// not reset. What a crash may cost otherwise is up to MaxLocalRetries
// failed runs missing from the item's count (docs/retries.md §1.2).
func (a *Agent) localRetryWritesFirst(it *item) bool {
	return a.cfg.LocalRetryDurable || it.job.spec.AgentTimeout.D() > 0 || it.set.timed
}

// localRetryOf is it's delivery, to run again on this agent.
func localRetryOf(it *item) *localRetry {
	m := it.m
	if r, ok := m.(*localRetry); ok {
		m = r.Msg
	}
	return &localRetry{Msg: m, md: it.md, wi: it.wi, st: it.st, rev: it.rev, key: it.key, n: it.localRetries + 1,
		reset: it.reset, unwritten: it.unwritten}
}

// writeWaiting writes the state of a local retry that leaves the agent
// before it runs again (localRetry.flush).
func (a *Agent) writeWaiting(r *localRetry) bool {
	return a.writeLocal(&item{m: r.Msg, md: r.md, wi: r.wi, st: r.st, rev: r.rev, key: r.key, reset: r.reset, unwritten: true})
}

// writeLocal writes the state of an item whose local retries (localretry.go)
// are not written yet, as its delivery leaves this agent: a nak, a hold, or
// its agent's shutdown. The runs not written are the item's own, or, for a
// local retry that has not come so far in process as to take them over,
// its message's. It reports false when the write found that another agent
// holds the item, which this one must then leave alone. A write that fails
// otherwise still lets the nak go: the next delivery decides from the
// state last written, without the runs of this one.
func (a *Agent) writeLocal(it *item) bool {
	if r, ok := it.m.(*localRetry); ok && !r.flush() {
		return false
	}
	if !it.unwritten {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), localWriteWait)
	defer cancel()
	_, fenced := a.persist(ctx, it)
	return !fenced
}

// localWriteWait bounds writeLocal: at shutdown the connection may be going.
const localWriteWait = 5 * time.Second

// persist saves the item's state. fenced reports a conflict: another agent
// holds the item now (this delivery outlived AckWait), and this one must
// step aside without acking or naking.
func (a *Agent) persist(ctx context.Context, it *item) (saved, fenced bool) {
	it.unwritten = false // written now, or never: one try
	err := a.saveState(ctx, it)
	switch {
	case err == nil:
		return true, false
	case isFenced(err) && a.stillHeld(it):
		// No other agent can hold this delivery yet: the state was read
		// from a replica behind the bucket's leader (a direct get; a
		// replica on a node whose store is full applies nothing), and the
		// revision it gave is not the last. Stepping aside would leave the
		// item to its AckWait, and the next delivery could read the same
		// replica; naked, it comes back at once and reads again.
		a.fencedLog.Warn().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).
			Msg("item state read from a replica behind its leader; delivering the item again to read it anew (more such lines within 30s are not logged)")
		a.nakDelay(it, staleStateDelay)
		return false, true
	case isFenced(err):
		a.fencedLog.Warn().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).
			Msg("item state changed under us: another agent holds the item; stepping aside (more such lines within 30s are not logged)")
		return false, true
	}
	ev := a.log.Warn()
	if a.link.unreachableItem(err, "item state") {
		ev = a.log.Debug()
	}
	ev.Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Msg("cannot persist the item state")
	a.noteStoreFull("state", err)
	return false, false
}

// staleStateDelay is the delayed nak of a delivery whose state was read
// from a replica behind the leader (persist).
const staleStateDelay = 200 * time.Millisecond

// stillHeld reports whether no other agent can hold it's delivery yet: it
// was taken from the pull loop less than a third of the consumer's AckWait
// ago, by this process's own clock (the server redelivers a message only
// after AckWait, which starts when the server sends it; a buffered message
// waits far less than the rest, docs/jetstream.md §9). A compare-and-set
// of the item's state refused so early was not another agent's doing.
func (a *Agent) stillHeld(it *item) bool {
	start := cmp.Or(it.reset, it.t0)
	return a.ackWait > 0 && !start.IsZero() && a.cfg.hooks.Clock.Now().Sub(start) < a.ackWait/3
}

// claim asks the job's retry budget for a unit for the item. ok is false
// when the budget could not be read. A denial is counted and announced
// (RetryBudgetExhausted).
func (a *Agent) claim(ctx context.Context, it *item) (g budget.Grant, ok bool) {
	g, err := a.budget.Claim(ctx, budget.Key(a.cfg.Pool, it.wi.JobID), it.st.Retries)
	if err != nil {
		a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Msg("budget claim failed; retrying later")
		a.noteStoreFull("budget", err)
		return g, false
	}
	a.traceBudget(it, g)
	if d := g.Deny; !g.Granted && d != nil {
		a.metrics.budgetDenied.WithLabelValues(d.Reason).Inc()
		a.event(it.wi.JobID, messages.EventBudget, messages.EventTypeBudgetExhausted, messages.BudgetExhaustedEvent{
			JobID: it.wi.JobID, ItemID: it.wi.ItemID, Scope: d.Scope(), Reason: d.Reason, Consumed: d.Consumed, Limit: d.Limit,
		})
	}
	return g, true
}

// lastDelivery reports whether this is the consumer's last delivery of the
// message: a delayed nak now would leave the item with no outcome.
func (a *Agent) lastDelivery(it *item) bool {
	return a.maxDeliver > 0 && it.md.NumDelivered >= a.maxDeliver
}

// finalize records a given-up item: the DLQ entry first (PubAck awaited),
// then the result, then Term. Every step is idempotent, so a redelivery
// after a crash repeats it safely.
func (a *Agent) finalize(ctx context.Context, it *item) {
	if it.st.Final == messages.OutcomeDeadLettered {
		if err := a.dlq.Write(ctx, a.dlqEntry(it)); err != nil {
			d := min(time.Duration(it.md.NumDelivered)*time.Second, 30*time.Second)
			a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Dur("delay", d).Msg("dead-letter publish failed; item kept, retrying later")
			a.metrics.dlqFailures.Inc()
			a.noteStoreFull("dlq", err)
			a.nakDelay(it, d)
			return
		}
		a.metrics.deadLettered.WithLabelValues(it.st.Reason).Inc()
		a.traceDeadLetter(it)
		if h := a.cfg.hooks.AfterDeadLetter; h != nil && !h(it.wi.JobID, it.wi.ItemID) {
			return
		}
	}
	res := a.result(it, it.st.Final)
	res.Reason, res.Error, res.ErrorClass = it.st.Reason, it.st.Error, it.st.ErrorClass
	if n := len(it.st.Outputs); n > 0 {
		res.Output = it.st.Outputs[n-1]
	}
	res.Signature = retry.Signature(it.st.Error)
	a.report(it, res, true)
}

// noteStoreFull counts a write that JetStream refused for want of room
// (docs/deploy.md, "A full store"): the item is kept and the write tried
// again, as for any failed write, and the count says why.
func (a *Agent) noteStoreFull(write string, err error) {
	if natsconn.StoreFull(err) && a.metrics != nil {
		a.metrics.storeFull.WithLabelValues(write).Inc()
	}
}
