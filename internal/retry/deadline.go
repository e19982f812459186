package retry

import "time"

// Deadline is when a job's agent_timeout ends an item's run: the start of
// its first step run plus the timeout (docs/retries.md §7). Unlike a
// step's retry_budget, which counts only backoff delays, it is a
// wall-clock bound: run time, delays, snoozes and time parked all count.
// The zero Deadline is none: it never passes and refuses nothing. It is a
// plain value.
type Deadline struct{ at time.Time }

// NewDeadline is the deadline of a run that started at start under
// timeout; none when timeout <= 0 or start is zero.
func NewDeadline(start time.Time, timeout time.Duration) Deadline {
	if timeout <= 0 || start.IsZero() {
		return Deadline{}
	}
	return Deadline{at: start.Add(timeout)}
}

// IsZero reports whether d is none.
func (d Deadline) IsZero() bool { return d.at.IsZero() }

// At is the deadline (the zero time for none).
func (d Deadline) At() time.Time { return d.at }

// Passed reports whether the time is up at now.
func (d Deadline) Passed(now time.Time) bool { return !d.at.IsZero() && !now.Before(d.at) }

// Refuses reports whether a wait of delay from now would end with the
// time up: the next run would start with nothing left to run in.
func (d Deadline) Refuses(now time.Time, delay time.Duration) bool {
	return !d.at.IsZero() && !now.Add(max(delay, 0)).Before(d.at)
}

// Bound is the timeout of a run starting now: timeout (0 = none), or what
// is left before the deadline when that is shorter (at least 1ms, so a run
// is never started with no timeout at all).
func (d Deadline) Bound(now time.Time, timeout time.Duration) time.Duration {
	if d.at.IsZero() {
		return timeout
	}
	left := max(d.at.Sub(now), time.Millisecond)
	if timeout <= 0 || left < timeout {
		return left
	}
	return timeout
}
