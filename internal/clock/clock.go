// Package clock is jetfleet's one abstraction of time, so that components
// can be tested with a controlled clock: what reads the time calls Now,
// what waits calls After. The retry loops (internal/retry's Backoff), the
// DLQ replayer's pacing, the budget's warnings, leases and limits all take
// a Clock.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and waits. Implementations are safe for concurrent
// use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// AfterFunc is a Clock that waits with a function such as time.After (a
// test's hook) and reads the system time.
type AfterFunc func(d time.Duration) <-chan time.Time

// Now returns time.Now().
func (AfterFunc) Now() time.Time { return time.Now() }

// After calls f.
func (f AfterFunc) After(d time.Duration) <-chan time.Time { return f(d) }

// Manual is a clock that moves only when told to, for tests: After's
// channels fire when Advance moves the clock to or past their time. It is
// safe for concurrent use.
type Manual struct {
	mu      sync.Mutex
	t       time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewManual returns a Manual clock that reads t.
func NewManual(t time.Time) *Manual { return &Manual{t: t} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// After returns a channel that receives the clock's time once Advance has
// moved it d forward; at once for d <= 0.
func (c *Manual) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.t
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.t.Add(d), ch: ch})
	return ch
}

// Advance moves the clock d forward (backward for a negative d) and fires
// the After channels whose time has come.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.t
	}
	c.waiters = kept
}
