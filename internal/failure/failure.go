// Package failure decides what follows a failed step run, up to the
// item's outcome: the pure verdicts [StepFailure.Verdict],
// [End.OnFailure] and [ItemFailure.Verdict], and the spread of a parked
// delivery ([ParkDelay]). The agent (pkg/agent) and the outage simulator
// (internal/simulate) both call them, so a fleet and its simulation
// cannot decide a failure differently; it is internal because only they
// need it (docs/retries.md §1 walks through the path).
//
// It decides first and the agent acts after, as River's job executor
// does with a failed job:
//
//   - the verdicts are pure functions of what happened (the retry
//     policy's decision, the last delivery, the budget's grant,
//     on_item_failure), with one branch per end;
//   - what a verdict reads that costs a request or a run (a unit of the
//     job's retry budget, the fallback, the custom step) is gathered just
//     before it: NeedsClaim says when to ask the budget;
//   - the agent's act carries out the end reached, in one switch.
package failure

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// End is where the failure path of a failed step run ends: the one
// decided result that the agent's act and the outage simulator's event
// loop both switch on. StepFailure.Verdict, End.OnFailure and
// ItemFailure.Verdict each return one. It is a plain value.
type End struct {
	Kind EndKind
	// Delay is the wait before the item runs again (EndRetry, EndSnooze,
	// EndItemRetry).
	Delay time.Duration
	// Output is the fallback's output, the step's (EndFallback).
	Output string
	// Outcome is the item's terminal outcome once its end is decided
	// (EndGiveUp): messages.OutcomeDeadLettered, OutcomeSkipped or
	// OutcomeFailed. Empty on a step's give-up whose on_failure and
	// on_item_failure are still to apply.
	Outcome string
	// Reason is why the step or the item gives up (EndGiveUp,
	// EndTimedOut): the policy's reason (attempts, retry_budget,
	// not_retryable, permanent), max_deliveries, agent_timeout,
	// circuit_open, a budget denial (item_budget_exhausted,
	// job_budget_exhausted), or on_item_failure's (item_retries,
	// custom_failed).
	Reason string
	// Class is the error class recorded with a final outcome.
	Class string
	// Deny is the budget's denial when it refused a retry.
	Deny *budget.Deny
	// State is the step's retry state to persist (a step's verdict; a
	// snooze's is the state it read, unchanged).
	State retry.State

	err     error // the item's error, once decided
	decided error // the policy's give-up error
	cause   error // the failure
}

// EndKind says which end a failed step run reached. Its value is the
// decision the attempt is recorded with in the item's history.
type EndKind string

// The ends.
const (
	// EndLater: the job's retry budget or the item's state could not be
	// read: the delivery comes back after a second with nothing recorded,
	// and runs the step again as the same attempt.
	EndLater EndKind = ""
	// EndRetry: the step runs again after Delay (a delayed nak or a park);
	// the job's retry budget granted the unit it costs.
	EndRetry EndKind = "retry"
	// EndSnooze: the step runs again after Delay; no attempt is counted and
	// no budget spent.
	EndSnooze EndKind = "snooze"
	// EndTimedOut: the item's agent_timeout is up, or would be before the
	// step ran again: the item fails at once (on_failure does not apply: it
	// has no time left for a next step or a fallback); on_item_failure
	// decides its end.
	EndTimedOut EndKind = "timed_out"
	// EndGiveUp: the step stops retrying, for Reason. Without Outcome its
	// on_failure, then on_item_failure, decide what follows; with Outcome
	// the item has its terminal outcome.
	EndGiveUp EndKind = "give_up"
	// EndContinue: the step gave up and its on_failure is continue: the
	// item goes on with its next step.
	EndContinue EndKind = "continue"
	// EndFallback: the step gave up and its fallback succeeded: the item
	// goes on with its next step, Output as the step's.
	EndFallback EndKind = "fallback"
	// EndItemRetry: on_item_failure: retry runs the whole item again from
	// its first step after Delay.
	EndItemRetry EndKind = "item_retry"
)

func (k EndKind) String() string {
	if k == EndLater {
		return "later"
	}
	return string(k)
}

// Err is the error of a step that gives up or times out, or of the item
// once its end is decided: a *retry.GiveUpError with the reason and the
// failure, the item's error when on_failure or on_item_failure added one
// (nil for the other ends). Built on demand: the simulator's give-ups do
// not need it.
func (e *End) Err() error {
	switch {
	case e.err != nil || e.Outcome != "":
		return e.err
	case e.Kind != EndGiveUp && e.Kind != EndTimedOut:
		return nil
	case e.decided != nil:
		return e.decided
	}
	return &retry.GiveUpError{Reason: e.Reason, Attempts: e.State.Attempts, Err: e.cause}
}

// OnFailure applies the step's on_failure to its give-up e: continue
// goes on with the next step, a fallback that succeeded (fallbackErr nil)
// too with its output; otherwise (stop, a failed fallback) e is returned,
// the fallback's error joined to its error, for on_item_failure. Other
// ends are returned as they are.
func (e End) OnFailure(fa retry.FailureAction, fallbackOut string, fallbackErr error) End {
	if e.Kind != EndGiveUp || e.Outcome != "" {
		return e
	}
	switch {
	case fa.Action == messages.OnFailureContinue:
		return End{Kind: EndContinue, State: e.State}
	case fa.NeedsFallback() && fallbackErr == nil && !fa.FailAfter:
		return End{Kind: EndFallback, Output: fallbackOut, State: e.State}
	case fa.NeedsFallback() && fallbackErr == nil:
		e.err = errors.Join(e.Err(), errors.New("fallback ran; fail_workflow: true fails the step after it"))
	case fa.NeedsFallback():
		e.err = errors.Join(e.Err(), fmt.Errorf("fallback: %w", fallbackErr))
	}
	return e
}

// StepFailure is what the verdict on a failed step run reads. It is a plain
// value.
type StepFailure struct {
	// Decision is the step's retry policy on the failure ([retry.Policy.Decide]).
	// For a run its circuit breaker refused (CircuitOpen), only its State
	// is read: the step's retry state, unchanged.
	Decision retry.Decision
	// NotRun is set when the step did not run: the item's agent_timeout
	// was up before it began, or (CircuitOpen) the step's own circuit
	// breaker (retry_config.circuit_breaker) refused it, and the step fails
	// fast (circuit_open). Either says nothing of the dependency.
	NotRun, CircuitOpen bool
	// Now and Deadline are the decision's time and the item's
	// agent_timeout (zero: none): a step whose retry or snooze would come
	// back with the time up ends StepTimedOut instead.
	Now      time.Time
	Deadline retry.Deadline
	// Err is the failure ([retry.Failure.Error]): the last error of a step
	// that gives up for a reason the policy did not decide.
	Err error
	// LastDelivery is set on the consumer's last delivery of the message
	// (NumDelivered = MaxDeliver): after a nak the server would not
	// deliver it again, so the step gives up instead (max_deliveries).
	LastDelivery bool
	// Grant is the job budget's answer to the claim NeedsClaim asks for;
	// read only then. A Grant without a Deny is a denial of the job budget.
	Grant budget.Grant
}

// NeedsClaim reports whether the verdict needs a unit of the job's retry
// budget: the policy would retry and a retry can still come back, before
// the item's agent_timeout. A give-up, a snooze, the last delivery, a
// retry past the deadline and a step that did not run spend nothing.
func (f *StepFailure) NeedsClaim() bool {
	d := &f.Decision
	return !f.NotRun && !f.CircuitOpen && d.Action == retry.ActionRetry && !f.LastDelivery && !f.Deadline.Refuses(f.Now, d.Delay)
}

// Breaker is the circuit-breaker outcome of the failed step run, for the
// job's breaker if it is the delivery's first, and for the step's own: a
// snooze, a permanent error or one no retry_on matches is the item's own
// doing and says nothing of the dependency (ignored), nor does a run the
// step's breaker refused; anything else counts as a failure of the
// dependency.
func (f *StepFailure) Breaker() retry.Outcome {
	d := &f.Decision
	if f.NotRun || f.CircuitOpen || d.Action == retry.ActionSnooze || d.Reason == messages.ReasonPermanent || d.Reason == messages.ReasonNotRetryable {
		return retry.OutcomeIgnored
	}
	return retry.OutcomeFailure
}

// Verdict decides where the failed step run ends, one branch per end.
func (f *StepFailure) Verdict() End {
	d := &f.Decision
	v := End{State: d.State, cause: f.Err}
	switch {
	case f.CircuitOpen: // the step's breaker refused the run: fail fast
		v.Kind, v.Reason = EndGiveUp, messages.ReasonCircuitOpen
	case f.Deadline.Passed(f.Now): // the run ended with the item's time up
		v.Kind, v.Reason = EndTimedOut, messages.ReasonAgentTimeout
	case d.Action == retry.ActionGiveUp: // attempts, retry_budget, not_retryable, permanent
		v.Kind, v.Reason, v.decided = EndGiveUp, d.Reason, d.Err
	case f.LastDelivery: // a retry or snooze that would never come back
		v.Kind, v.Reason = EndGiveUp, messages.ReasonMaxDeliveries
	case f.Deadline.Refuses(f.Now, d.Delay): // it would come back with the time up
		v.Kind, v.Reason = EndTimedOut, messages.ReasonAgentTimeout
	case d.Action == retry.ActionSnooze:
		v.Kind, v.Delay = EndSnooze, d.Delay
	case f.Grant.Granted:
		v.Kind, v.Delay = EndRetry, d.Delay
	default: // the job's retry budget refused the unit
		v.Kind = EndGiveUp
		v.Reason, v.Deny = denial(f.Grant)
	}
	return v
}

// ItemFailure is what the verdict on a failed item reads: an item whose
// step gave up and whose on_failure did not carry it on. It is a plain
// value.
type ItemFailure struct {
	// Reduce is set for a reduce item: its outcome is the job's, and
	// on_item_failure does not apply.
	Reduce bool
	// Action is error_policy.on_item_failure ([retry.Workflow.Action]).
	Action string
	// Reason and Err are why the item failed: the step's give-up (with a
	// failed fallback's error).
	Reason string
	Err    error
	// Retry is the workflow's verdict on the failure
	// ([retry.Workflow.OnItemFailure]); read under on_item_failure: retry
	// and dlq ([retry.RetriesItems]).
	Retry retry.Verdict
	// Grant is the job budget's answer to the claim NeedsClaim asks for.
	Grant budget.Grant
	// CustomErr is the error of the on_item_failure custom step (nil: it
	// took the item over); read under on_item_failure: custom.
	CustomErr error
}

// NeedsClaim reports whether the verdict needs a unit of the job's retry
// budget: the workflow's retry_config has runs left for the item.
func (f *ItemFailure) NeedsClaim() bool {
	return !f.Reduce && retry.RetriesItems(f.Action) && f.Retry.Action == messages.ItemFailureRetry
}

// Verdict decides what becomes of the failed item, one branch per end.
func (f *ItemFailure) Verdict() End {
	v := End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: f.Reason, err: f.Err}
	switch {
	case f.Reduce: // its outcome is the job's
		v.Outcome = messages.OutcomeFailed
	case f.Action == messages.ItemFailureSkip:
		v.Outcome = messages.OutcomeSkipped
	case f.Action == messages.ItemFailureCustom && f.CustomErr == nil: // the custom step took it over
		v.Outcome = messages.OutcomeFailed
	case f.Action == messages.ItemFailureCustom:
		v.Reason = messages.ReasonCustomFailed
		v.err = errors.Join(f.Err, fmt.Errorf("on_item_failure custom step: %w", f.CustomErr))
	case !retry.RetriesItems(f.Action): // stop
	case f.Retry.Action != messages.ItemFailureRetry: // runs spent, or permanent ("" under dlq without retry_config)
		v.Reason = cmp.Or(f.Retry.Reason, v.Reason)
	case f.Grant.Granted:
		v = End{Kind: EndItemRetry, Delay: f.Retry.Delay}
	default: // the job's retry budget refused the run
		v.Reason, v.Deny = denial(f.Grant)
	}
	// Otherwise dead-lettered: dlq, retry, and stop (the coordinator then
	// stops the job).
	return v
}

// denial is the reason and the denial of a refused claim.
func denial(g budget.Grant) (string, *budget.Deny) {
	if g.Deny == nil {
		return messages.ReasonJobBudget, nil
	}
	return g.Deny.Reason, g.Deny
}
