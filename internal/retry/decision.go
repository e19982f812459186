package retry

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// State is a step's retry state, persisted between attempts (in
// wire.ItemState, see [StateFromItem] and [State.ApplyTo]) so that any
// agent, after any restart, continues where the last one stopped. The zero
// State is a step that has not failed yet; reset it when the item moves on
// to another step. It marshals to JSON with snake_case names and humantime
// durations.
type State struct {
	// Attempts is the number of failed runs of the step so far.
	Attempts int
	// FirstFailure is when the step first failed.
	FirstFailure time.Time
	// DelaySpent is the cumulative backoff delay granted so far, jitter
	// included: what retry_budget bounds. Run time never enters it.
	DelaySpent time.Duration
	// LastDelay is the last backoff granted (decorrelated jitter grows from it).
	LastDelay time.Duration
}

type stateJSON struct {
	Attempts     int               `json:"attempts"`
	FirstFailure *time.Time        `json:"first_failure,omitempty"`
	DelaySpent   messages.Duration `json:"delay_spent"`
	LastDelay    messages.Duration `json:"last_delay"`
}

// MarshalJSON writes {"attempts", "first_failure", "delay_spent",
// "last_delay"}.
func (s State) MarshalJSON() ([]byte, error) {
	j := stateJSON{Attempts: s.Attempts, DelaySpent: messages.Duration(s.DelaySpent), LastDelay: messages.Duration(s.LastDelay)}
	if !s.FirstFailure.IsZero() {
		j.FirstFailure = &s.FirstFailure
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *State) UnmarshalJSON(b []byte) error {
	var j stateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = State{Attempts: j.Attempts, DelaySpent: j.DelaySpent.D(), LastDelay: j.LastDelay.D()}
	if j.FirstFailure != nil {
		s.FirstFailure = *j.FirstFailure
	}
	return nil
}

// StateFromItem reads the current step's retry state from an item's state:
// StepAttempt, StepFirstFailure, StepDelaySpent, LastDelay.
func StateFromItem(is *wire.ItemState) State {
	if is == nil {
		return State{}
	}
	s := State{
		Attempts:     is.StepAttempt,
		FirstFailure: is.StepFirstFailure,
		DelaySpent:   is.StepDelaySpent.D(),
		LastDelay:    is.LastDelay.D(),
	}
	return s
}

// ApplyTo writes s into the Step* fields and LastDelay of is.
func (s State) ApplyTo(is *wire.ItemState) {
	is.StepAttempt = s.Attempts
	is.StepFirstFailure = s.FirstFailure
	is.StepDelaySpent = messages.Duration(s.DelaySpent)
	is.LastDelay = messages.Duration(s.LastDelay)
}

// Action is the kind of a [Decision].
type Action int

// Actions. Their String values are those of messages.Attempt.Decision.
const (
	// ActionRetry: run the step again after Decision.Delay (NakWithDelay).
	ActionRetry Action = iota + 1
	// ActionGiveUp: stop retrying; Decision.Reason and Decision.Err say why, and
	// the step's on_failure ([Policy.OnFailure]) says what follows.
	ActionGiveUp
	// ActionSnooze: run the step again after Decision.Delay without counting the
	// failure (no attempt, no budget spent).
	ActionSnooze
)

func (a Action) String() string {
	switch a {
	case ActionRetry:
		return "retry"
	case ActionGiveUp:
		return "give_up"
	case ActionSnooze:
		return "snooze"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is what follows a failed attempt.
type Decision struct {
	Action Action
	// Delay is the backoff before the next run (ActionRetry and ActionSnooze).
	Delay time.Duration
	// Reason is why the step gives up: messages.ReasonAttempts,
	// ReasonRetryBudget, ReasonNotRetryable or ReasonPermanent ("" otherwise).
	Reason string
	// Err is a *GiveUpError wrapping the last error (ActionGiveUp only), so
	// errors.Is(d.Err, lastErr) and errors.Is(d.Err, ErrBudgetExhausted) hold.
	Err error
	// Refused is, for a retry_budget give-up, the delay the budget refused.
	Refused time.Duration
	// Class is the error class of the failure ([Classify]).
	Class string
	// State is the updated retry state, to persist before acting.
	State State
}

// Decide decides what follows a failed attempt of the step, given the state
// before this failure and the current time. It never sleeps. In order:
//
//  1. a [Permanent] marker gives up with reason permanent;
//  2. a [Snooze] marker snoozes: the state is returned unchanged;
//  3. the failure is counted (at the first one, FirstFailure = now);
//  4. an error no retry_on matcher matches gives up with not_retryable
//     (an [After] marker is always retryable);
//  5. after `attempts` failed runs it gives up with attempts;
//  6. the delay is computed ([Policy.Delay], or the [After] delay);
//  7. with a retry_budget, it gives up with retry_budget when
//     DelaySpent + delay > retry_budget: the budget counts the backoff
//     delays granted (jittered as granted), never run time, so `now`
//     plays no part in it;
//  8. otherwise it retries after the delay, adding it to DelaySpent.
//
// r is the jitter source (nil = [DefaultRand]). Decide is
// [Policy.DecideAssessed] of [Policy.Assess].
func (p *Policy) Decide(now time.Time, st State, f Failure, r Rand) Decision {
	return p.DecideAssessed(now, st, p.Assess(f), r)
}

// Assessment is what a decision reads from a failure besides the retry
// state and the clock: the error, its class, whether retry_on matches it,
// and its markers. Computing it runs the matchers' regular expressions;
// the rest of a decision is arithmetic. So a caller that fails many
// attempts the same way — the outage simulator, internal/simulate — assesses
// the failure once and decides each attempt with [Policy.DecideAssessed],
// through exactly the code the agent's [Policy.Decide] runs. Build it with
// [Policy.Assess]; it is an immutable value, safe to share.
type Assessment struct {
	err       error
	class     string
	retryable bool
	permanent bool
	snooze    bool
	snoozeD   time.Duration
	after     bool
	afterD    time.Duration
}

// Assess reads f for a decision of p: [Classify], [Policy.Retryable] and
// the [Permanent], [Snooze] and [After] markers in f's error chain.
func (p *Policy) Assess(f Failure) Assessment {
	a := Assessment{err: f.Error(), class: Classify(f), retryable: p.Retryable(f)}
	a.permanent = IsPermanent(a.err)
	a.snoozeD, a.snooze = SnoozeDelay(a.err)
	a.afterD, a.after = AfterDelay(a.err)
	return a
}

// Class is the error class of the assessed failure ([Classify]).
func (a Assessment) Class() string { return a.class }

// Err is the assessed failure as an error ([Failure.Error]).
func (a Assessment) Err() error { return a.err }

// DecideAssessed is [Policy.Decide] for a failure already assessed with
// [Policy.Assess] (by this policy: retry_on is the policy's).
func (p *Policy) DecideAssessed(now time.Time, st State, a Assessment, r Rand) Decision {
	if a.permanent {
		return p.giveUp(p.count(now, st), messages.ReasonPermanent, a.err, a.class)
	}
	if a.snooze {
		return Decision{Action: ActionSnooze, Delay: max(a.snoozeD, 0), Class: a.class, State: st}
	}
	st = p.count(now, st)
	if !a.retryable && !a.after {
		return p.giveUp(st, messages.ReasonNotRetryable, a.err, a.class)
	}
	if st.Attempts >= p.attempts {
		return p.giveUp(st, messages.ReasonAttempts, a.err, a.class)
	}
	var d time.Duration
	if a.after {
		d = max(a.afterD, 0) // honoured as given: clamp to [0, max(max_delay, d)]
	} else {
		d = p.Delay(st.Attempts, st.LastDelay, r)
	}
	if p.hasBudget && d > p.budget-st.DelaySpent {
		dec := p.giveUp(st, messages.ReasonRetryBudget, a.err, a.class)
		dec.Refused = d
		return dec
	}
	st.DelaySpent = addSat(st.DelaySpent, d)
	st.LastDelay = d
	return Decision{Action: ActionRetry, Delay: d, Class: a.class, State: st}
}

// count records one more failed attempt in st.
func (p *Policy) count(now time.Time, st State) State {
	if st.Attempts <= 0 || st.FirstFailure.IsZero() {
		st.FirstFailure = now
	}
	if st.Attempts < 0 {
		st.Attempts = 0
	}
	st.Attempts++
	return st
}

func (p *Policy) giveUp(st State, reason string, err error, class string) Decision {
	return Decision{
		Action: ActionGiveUp,
		Reason: reason,
		Err:    &GiveUpError{Reason: reason, Attempts: st.Attempts, Err: err},
		Class:  class,
		State:  st,
	}
}

// addSat is a + b, saturating at math.MaxInt64 (both are >= 0).
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
