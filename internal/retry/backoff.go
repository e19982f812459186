package retry

import (
	"context"
	"math"
	"time"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Exponential returns the policy of one of jetfleet's own retry loops (a
// server or bucket not there yet, a refused publish, a lost
// compare-and-set): delays doubling from initial up to maxDelay, without
// jitter (add it with [Policy.WithJitter]). Such loops run until they
// succeed, give up on their own terms or their context ends, so a
// [Backoff] over the policy never runs out of delays; the policy's
// attempts, which only [Policy.Decide] reads, are messages.MaxAttempts.
// Arguments out of range are clamped: initial below 0 is 0, maxDelay below
// initial is initial.
func Exponential(initial, maxDelay time.Duration) *Policy {
	initial = max(initial, 0)
	return &Policy{
		attempts:     messages.MaxAttempts,
		kind:         messages.BackoffExponential,
		initial:      initial,
		maxDelay:     max(maxDelay, initial),
		base:         2,
		increment:    -1,
		jitterFactor: messages.DefaultJitterFactor,
		jitterMode:   messages.JitterProportional,
		onFailure:    FailureAction{Action: messages.OnFailureStop},
	}
}

// WithJitter returns a copy of p whose delays are jittered in mode m
// (an unknown mode is proportional); factor, clamped to [0, 1], is the
// proportional mode's spread.
func (p *Policy) WithJitter(m messages.JitterMode, factor float64) *Policy {
	q := *p
	q.jitter, q.jitterMode = true, m
	if !(factor >= 0) { // also NaN
		factor = 0
	}
	q.jitterFactor = min(factor, 1)
	return &q
}

// Sleep waits d on clk (nil: the system clock), or until ctx ends, and then
// returns ctx's error.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if clk == nil {
		clk = clock.Real{}
	}
	select {
	case <-clk.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff drives a retry loop with a policy's delays: Next returns the
// delay before the next try — the policy's Delay(1, …), Delay(2, …), …
// without end, jittered from its Rand and capped at max_delay — Wait
// waits it out, and Reset starts again from the first delay (after a
// success, or a healthy stretch). The [Policy] computes; only Wait sleeps,
// on the clock.Clock it was given.
//
//	b := retry.NewBackoff(retry.Exponential(100*time.Millisecond, 2*time.Second), nil, nil)
//	for {
//		if err := try(ctx); err == nil || permanent(err) {
//			return err
//		}
//		if err := b.Wait(ctx); err != nil {
//			return err
//		}
//	}
//
// A Backoff is not safe for concurrent use: make one per loop.
type Backoff struct {
	policy *Policy
	rand   Rand
	clock  clock.Clock
	n      int
	prev   time.Duration
}

// NewBackoff returns a Backoff over p that jitters from r (nil:
// [DefaultRand]) and waits on clk (nil: the system clock).
func NewBackoff(p *Policy, r Rand, clk clock.Clock) *Backoff {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Backoff{policy: p, rand: r, clock: clk}
}

// Next returns the delay before the next try and counts it.
func (b *Backoff) Next() time.Duration {
	if b.n < math.MaxInt {
		b.n++
	}
	b.prev = b.policy.Delay(b.n, b.prev, b.rand)
	return b.prev
}

// Retries is how many delays Next has returned since the last Reset.
func (b *Backoff) Retries() int { return b.n }

// Reset makes the next delay the first one again.
func (b *Backoff) Reset() { b.n, b.prev = 0, 0 }

// Wait waits the next delay, or until ctx ends, and then returns ctx's
// error.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.clock, b.Next()) }
