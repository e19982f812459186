package retry

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Sentinels. A [*GiveUpError] matches (errors.Is) the one of its reason, and
// every invalid configuration error wraps ErrInvalidConfig.
var (
	// ErrInvalidConfig is wrapped by the errors of NewPolicy, NewBreaker,
	// NewWorkflow, NewWorkflowPolicy and NewCollector.
	ErrInvalidConfig = errors.New("retry: invalid config")
	// ErrAttemptsExhausted: the step ran its configured number of attempts.
	ErrAttemptsExhausted = errors.New("retry: attempts exhausted")
	// ErrBudgetExhausted: the next delay would overrun the retry_budget.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrNotRetryable: the error matched none of retry_on.
	ErrNotRetryable = errors.New("retry: error not retryable")
	// ErrPermanent: the handler marked the error with [Permanent].
	ErrPermanent = errors.New("retry: permanent error")
	// ErrCircuitOpen: the step's circuit breaker refused the run; the step
	// failed fast, without running.
	ErrCircuitOpen = errors.New("retry: circuit breaker open")
	// ErrAgentTimeout: the item's agent_timeout is up.
	ErrAgentTimeout = errors.New("retry: agent_timeout passed")
)

// GiveUpError is the terminal error of a step that stops retrying. It keeps
// the last error (Unwrap returns it, so errors.Is(err, lastErr) holds) and
// the reason, and it matches the sentinel of its reason with errors.Is —
// like failsafe-go's ExceededError and cenkalti/backoff's RetryError.
type GiveUpError struct {
	// Reason is messages.ReasonAttempts, ReasonRetryBudget,
	// ReasonNotRetryable, ReasonPermanent, ReasonCircuitOpen or
	// ReasonAgentTimeout, or a reason decided elsewhere (a budget denial,
	// max_deliveries).
	Reason string
	// Attempts is the number of failed runs of the step, this one included.
	Attempts int
	// Err is the last error.
	Err error
}

func (e *GiveUpError) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	switch e.Reason {
	case messages.ReasonAttempts:
		return fmt.Sprintf("retry: gave up after %d attempts: %s", e.Attempts, msg)
	case messages.ReasonRetryBudget:
		return fmt.Sprintf("retry: retry budget exhausted after %d attempts: %s", e.Attempts, msg)
	case messages.ReasonNotRetryable:
		return fmt.Sprintf("retry: not retryable (attempt %d): %s", e.Attempts, msg)
	case messages.ReasonPermanent:
		return fmt.Sprintf("retry: permanent error (attempt %d): %s", e.Attempts, msg)
	case messages.ReasonCircuitOpen, messages.ReasonAgentTimeout:
		head := "retry: circuit breaker open, failing fast"
		if e.Reason == messages.ReasonAgentTimeout {
			head = "retry: agent_timeout passed"
		}
		if errors.Is(e.Err, ErrCircuitOpen) || errors.Is(e.Err, ErrAgentTimeout) {
			return fmt.Sprintf("%s (after %d attempts)", head, e.Attempts) // the step did not run
		}
		return fmt.Sprintf("%s after %d attempts: %s", head, e.Attempts, msg)
	}
	return fmt.Sprintf("retry: gave up (%s) after %d attempts: %s", e.Reason, e.Attempts, msg)
}

// Unwrap returns the last error.
func (e *GiveUpError) Unwrap() error { return e.Err }

// Is matches the sentinel of e's reason.
func (e *GiveUpError) Is(target error) bool {
	switch e.Reason {
	case messages.ReasonAttempts:
		return target == ErrAttemptsExhausted
	case messages.ReasonRetryBudget:
		return target == ErrBudgetExhausted
	case messages.ReasonNotRetryable:
		return target == ErrNotRetryable
	case messages.ReasonPermanent:
		return target == ErrPermanent
	case messages.ReasonCircuitOpen:
		return target == ErrCircuitOpen
	case messages.ReasonAgentTimeout:
		return target == ErrAgentTimeout
	}
	return false
}

// PermanentError marks an error that must not be retried. Build it with
// [Permanent]; detect it with [IsPermanent] (it survives %w wrapping).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent error"
	}
	return e.Err.Error()
}

// Unwrap returns the marked error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as not retryable: the step gives up at once with
// reason "permanent" (its on_failure still applies). Unlike cenkalti/backoff,
// Permanent(nil) is not nil — a handler that asks for no retry must not
// turn into a success — it is a marker with the message "permanent error".
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err, or an error it wraps, was marked with [Permanent].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// AfterError asks for a retry after a delay chosen by the handler, typically
// a server's Retry-After. Build it with [After].
type AfterError struct {
	Delay time.Duration
	Err   error
}

func (e *AfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *AfterError) Unwrap() error { return e.Err }

// After asks for a retry after d instead of the computed backoff, e.g. from
// an HTTP Retry-After header. The failure still counts as an attempt, still
// spends the retry budget, and is retried even when retry_on would not match
// it (the handler asked for the retry). The delay is honoured as given — not
// capped at max_delay and not jittered — clamped to [0, max(max_delay, d)],
// which in effect only turns a negative d into 0.
func After(d time.Duration, err error) error { return &AfterError{Delay: d, Err: err} }

// AfterDelay returns the delay of an [After] marker in err's chain.
func AfterDelay(err error) (time.Duration, bool) {
	var a *AfterError
	if errors.As(err, &a) {
		return a.Delay, true
	}
	return 0, false
}

// SnoozeError postpones an item without counting a failure. Build it with [Snooze].
type SnoozeError struct{ Delay time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snooze %s", e.Delay) }

// Snooze asks for the step to run again after d without spending an
// attempt or any budget — for "not yet" conditions (River's JobSnooze). A
// negative d is taken as 0.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// SnoozeDelay returns the delay of a [Snooze] marker in err's chain.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *SnoozeError
	if errors.As(err, &s) {
		return s.Delay, true
	}
	return 0, false
}

// ConfigError lists every problem of a configuration, each with the path of
// its field relative to the configuration given ("retry_on[2].pattern"), so
// a caller can prefix its own path. It matches ErrInvalidConfig.
type ConfigError struct {
	Problems []messages.FieldError
}

func (e *ConfigError) Error() string {
	s := "retry: invalid config: "
	for i, p := range e.Problems {
		if i > 0 {
			s += "; "
		}
		s += p.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

func (e *ConfigError) add(field, format string, args ...any) {
	e.Problems = append(e.Problems, messages.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// problemError is the one problem of a single value (a matcher, an
// on_failure): its Error has the package's prefix, its message alone goes
// into a ConfigError under the value's field. It matches ErrInvalidConfig.
type problemError struct{ msg string }

func problem(format string, args ...any) error {
	return &problemError{msg: fmt.Sprintf(format, args...)}
}

func (e *problemError) Error() string { return "retry: " + e.msg }

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *problemError) Is(target error) bool { return target == ErrInvalidConfig }

// problemText is what a ConfigError lists for err: a problemError's
// message, or any other error's text.
func problemText(err error) string {
	if p, ok := errors.AsType[*problemError](err); ok {
		return p.msg
	}
	return err.Error()
}

// err returns e, or nil when it holds no problem.
func (e *ConfigError) err() error {
	if len(e.Problems) == 0 {
		return nil
	}
	return e
}
