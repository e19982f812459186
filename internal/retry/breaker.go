package retry

import (
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Circuit-breaker defaults.
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerSuccessThreshold = 3
	DefaultBreakerTimeout          = 30 * time.Second
	DefaultBreakerHalfOpenRequests = 3
)

// Circuit states.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// BreakerState is a circuit breaker's state, kept in KV and updated with
// compare-and-set so the whole fleet shares it. The zero value is a closed
// breaker with no failures, so a missing key needs no special case.
type BreakerState struct {
	// State is closed (or ""), open or half_open.
	State string `json:"state"`
	// Failures counts consecutive failures while closed.
	Failures int `json:"failures"`
	// OpenedAt is when the breaker last opened.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	// HalfOpenAt is when it became half-open, or when its lost probes were
	// last written off.
	HalfOpenAt time.Time `json:"half_open_at,omitzero"`
	// Probes is the number of half-open probes admitted and not yet reported.
	Probes int `json:"probes"`
	// Successes counts probe successes while half-open.
	Successes int `json:"successes"`
}

// Is reports whether the breaker is in state s (closed also matches "").
func (s BreakerState) Is(state string) bool {
	if s.State == "" {
		return state == CircuitClosed
	}
	return s.State == state
}

// Breaker is the circuit-breaker state machine of a job's
// error_policy.circuit_breaker, as pure functions from state to state:
//
//	closed    → open       after failure_threshold consecutive failures
//	open      → half_open  once timeout has passed since it opened (at Admit)
//	half_open → closed     after success_threshold probe successes
//	half_open → open       at any failure
//
// Half-open admits at most half_open_requests probes in flight: with no
// result reported, exactly that many calls to Admit succeed. Probes that
// never report (an agent crashed) are written off after timeout, so the
// breaker cannot stay half-open forever. A Breaker is immutable and safe
// for concurrent use; the states it returns are what callers CAS into KV.
type Breaker struct {
	failureThreshold int
	successThreshold int
	timeout          time.Duration
	halfOpenRequests int
}

// NewBreaker compiles cfg (nil = defaults 5 / 3 / 30s / 3; zero fields take
// their default). Negative values are an error.
func NewBreaker(cfg *messages.CircuitBreakerConfig) (*Breaker, error) {
	b := &Breaker{
		failureThreshold: DefaultBreakerFailureThreshold,
		successThreshold: DefaultBreakerSuccessThreshold,
		timeout:          DefaultBreakerTimeout,
		halfOpenRequests: DefaultBreakerHalfOpenRequests,
	}
	if cfg == nil {
		return b, nil
	}
	var ce ConfigError
	set := func(field string, v int, dst *int) {
		switch {
		case v < 0:
			ce.add(field, "must not be negative, got %d", v)
		case v > 0:
			*dst = v
		}
	}
	set("failure_threshold", cfg.FailureThreshold, &b.failureThreshold)
	set("success_threshold", cfg.SuccessThreshold, &b.successThreshold)
	set("half_open_requests", cfg.HalfOpenRequests, &b.halfOpenRequests)
	switch {
	case cfg.Timeout < 0:
		ce.add("timeout", "must not be negative, got %s", cfg.Timeout)
	case cfg.Timeout > 0:
		b.timeout = cfg.Timeout.D()
	}
	if err := ce.err(); err != nil {
		return nil, err
	}
	return b, nil
}

// Timeout is how long the breaker stays open.
func (b *Breaker) Timeout() time.Duration { return b.timeout }

// Admit asks whether a call may run now. When it may not, retryAt is when to
// ask again: the end of the open period, or — half-open with every probe
// out — a quarter of the timeout later (at least 1ms), since a probe result
// may close the breaker at any moment. Parked items wait with NakWithDelay
// and spend no attempt or budget.
//
// A state opened or half-opened after now (a clock far ahead, or a value
// written by hand: the breaker bucket is shared by every agent) counts as
// changed now, so that the breaker stays open at most the timeout from now.
func (b *Breaker) Admit(now time.Time, st BreakerState) (next BreakerState, admitted bool, retryAt time.Time) {
	if st.OpenedAt.After(now) {
		st.OpenedAt = now
	}
	if st.HalfOpenAt.After(now) {
		st.HalfOpenAt = now
	}
	switch {
	case st.Is(CircuitOpen):
		reopen := st.OpenedAt.Add(b.timeout)
		if now.Before(reopen) {
			return st, false, reopen
		}
		st = BreakerState{State: CircuitHalfOpen, OpenedAt: st.OpenedAt, HalfOpenAt: now}
		fallthrough
	case st.Is(CircuitHalfOpen):
		if st.Probes >= b.halfOpenRequests && !now.Before(st.HalfOpenAt.Add(b.timeout)) {
			st.Probes, st.HalfOpenAt = 0, now // the outstanding probes are lost
		}
		if st.Probes < b.halfOpenRequests {
			st.Probes++
			return st, true, time.Time{}
		}
		return st, false, now.Add(max(b.timeout/4, time.Millisecond))
	}
	return st, true, time.Time{}
}

// OnSuccess records a successful call. Closed: the failure count resets.
// Half-open: the probe is counted, and success_threshold successes close
// the breaker. Open: ignored (a call admitted before it opened). When the
// returned state equals st nothing changed and KV need not be written.
func (b *Breaker) OnSuccess(now time.Time, st BreakerState) BreakerState {
	switch {
	case st.Is(CircuitHalfOpen):
		st.Probes = max(st.Probes-1, 0)
		st.Successes++
		if st.Successes >= b.successThreshold {
			return BreakerState{State: CircuitClosed}
		}
		return st
	case st.Is(CircuitOpen):
		return st
	}
	if st.Failures == 0 {
		return st // unchanged: no KV write needed
	}
	return BreakerState{State: CircuitClosed}
}

// OnIgnored records a call whose outcome says nothing about the
// dependency: the item was at fault (a permanent or non-retryable error) or
// it snoozed. Half-open: the probe's slot is freed without counting a
// success, so another probe may run. Closed and open: nothing changes, the
// count of consecutive failures included.
func (b *Breaker) OnIgnored(now time.Time, st BreakerState) BreakerState {
	if st.Is(CircuitHalfOpen) && st.Probes > 0 {
		st.Probes--
	}
	return st
}

// OnFailure records a failed call. Closed: failure_threshold consecutive
// failures open the breaker. Half-open: any failure re-opens it. Open:
// ignored (the open period is not extended).
func (b *Breaker) OnFailure(now time.Time, st BreakerState) BreakerState {
	switch {
	case st.Is(CircuitHalfOpen):
		return BreakerState{State: CircuitOpen, OpenedAt: now}
	case st.Is(CircuitOpen):
		return st
	}
	st.State = CircuitClosed
	st.Failures++
	if st.Failures >= b.failureThreshold {
		return BreakerState{State: CircuitOpen, OpenedAt: now}
	}
	return st
}

// Outcome is what a call admitted by [Breaker.Admit] reports.
type Outcome int

// Outcomes of a call.
const (
	// OutcomeSuccess: the call ran without a failure ([Breaker.OnSuccess]).
	OutcomeSuccess Outcome = iota + 1
	// OutcomeFailure: the call failed in a way that may be the
	// dependency's ([Breaker.OnFailure]).
	OutcomeFailure
	// OutcomeIgnored: the call's failure was the item's own fault, or it
	// snoozed ([Breaker.OnIgnored]).
	OutcomeIgnored
)

// Ticket is what a call admitted by [Breaker.Admit] carries to its
// outcome: whether it is a probe of the half-open period that began at
// Epoch. Build it with [TicketOf].
type Ticket struct {
	Probe bool
	Epoch time.Time
}

// TicketOf is the ticket of a call admitted into st, the state Admit
// returned: a probe when st is half-open.
func TicketOf(st BreakerState) Ticket {
	if st.Is(CircuitHalfOpen) {
		return Ticket{Probe: true, Epoch: st.HalfOpenAt}
	}
	return Ticket{}
}

// Settle records the outcome o of a call admitted with ticket t into st.
// While half-open only the outcomes of that period's probes count: a call
// admitted before the breaker opened, or a probe of an earlier half-open
// period, says nothing about the recovery and leaves st as it is.
func (b *Breaker) Settle(now time.Time, st BreakerState, t Ticket, o Outcome) BreakerState {
	if st.Is(CircuitHalfOpen) && !(t.Probe && st.HalfOpenAt.Equal(t.Epoch)) {
		return st
	}
	switch o {
	case OutcomeSuccess:
		return b.OnSuccess(now, st)
	case OutcomeFailure:
		return b.OnFailure(now, st)
	case OutcomeIgnored:
		return b.OnIgnored(now, st)
	}
	return st
}
