package agent

import (
	"time"

	"github.com/jetfleet/jetfleet/pkg/retry"
)

// Marker errors a handler returns to steer its retries, so that a handler
// needs no import but this package. They are package retry's markers:
// retry.IsPermanent, retry.AfterDelay and retry.SnoozeDelay detect them.

// Permanent marks err as not retryable: the step gives up at once (its
// on_failure still applies). Permanent(nil) is a failure too, with the
// message "permanent error".
func Permanent(err error) error { return retry.Permanent(err) }

// After asks for a retry after d instead of the computed backoff (a
// server's Retry-After). It still counts as an attempt and spends the
// retry budget.
func After(d time.Duration, err error) error { return retry.After(d, err) }

// Snooze asks for the step to run again after d without spending an
// attempt or any budget: for "not yet" conditions.
func Snooze(d time.Duration) error { return retry.Snooze(d) }
