package retry

import (
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
)

// Marker errors a handler returns to steer its retries, and their readers.
// They survive %w wrapping; docs/retries.md §6 says what each one does.

// Permanent marks err as not retryable: the step gives up at once with
// reason "permanent" (its on_failure still applies). Permanent(nil) is a
// failure too, with the message "permanent error": a handler that asks
// for no retry must not turn into a success.
func Permanent(err error) error { return retry.Permanent(err) }

// IsPermanent reports whether err, or an error it wraps, was marked with
// [Permanent].
func IsPermanent(err error) bool { return retry.IsPermanent(err) }

// After asks for a retry after d instead of the computed backoff (a
// server's Retry-After). It still counts as an attempt, still spends the
// retry budget, and is retried even when retry_on would not match it. The
// delay is honoured as given: not capped at max_delay, not jittered (a
// negative d is taken as 0).
func After(d time.Duration, err error) error { return retry.After(d, err) }

// AfterDelay returns the delay of an [After] marker in err's chain.
func AfterDelay(err error) (time.Duration, bool) { return retry.AfterDelay(err) }

// Snooze asks for the step to run again after d without spending an
// attempt or any budget: for "not yet" conditions. A negative d is taken
// as 0.
func Snooze(d time.Duration) error { return retry.Snooze(d) }

// SnoozeDelay returns the delay of a [Snooze] marker in err's chain.
func SnoozeDelay(err error) (time.Duration, bool) { return retry.SnoozeDelay(err) }

func isAfter(err error) bool  { _, ok := retry.AfterDelay(err); return ok }
func isSnooze(err error) bool { _, ok := retry.SnoozeDelay(err); return ok }
