package retry

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// recordingClock fires at once and records every wait, so loops are
// tested without sleeping. With block set, its channels never fire.
type recordingClock struct {
	waits []time.Duration
	block bool
}

// Now is the zero time: a Backoff only waits.
func (c *recordingClock) Now() time.Time { return time.Time{} }

func (c *recordingClock) After(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	if !c.block {
		ch <- t0.Add(d)
	}
	return ch
}

func nextN(b *Backoff, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.Next()
	}
	return out
}

func TestBackoffTimelines(t *testing.T) {
	ms := func(ns ...float64) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n * float64(time.Millisecond))
		}
		return out
	}
	tests := []struct {
		name   string
		policy *Policy
		rand   Rand
		want   []time.Duration
	}{
		{
			// The work publisher's refused batches: 50ms doubling while under 2s.
			name:   "exponential to an uneven cap",
			policy: Exponential(50*time.Millisecond, 3200*time.Millisecond),
			want:   ms(50, 100, 200, 400, 800, 1600, 3200, 3200, 3200),
		},
		{
			name:   "exponential to a cap between two doublings",
			policy: Exponential(100*time.Millisecond, 2*time.Second),
			want:   ms(100, 200, 400, 800, 1600, 2000, 2000),
		},
		{
			// The budget's claims: equal jitter, d/2 at the low end of the draw ...
			name:   "equal jitter, lowest draw",
			policy: Exponential(10*time.Millisecond, time.Second).WithJitter(messages.JitterEqual, 0),
			rand:   fixedRand(0),
			want:   ms(5, 10, 20, 40, 80, 160, 320, 500, 500),
		},
		{
			// ... and d at the high end.
			name:   "equal jitter, highest draw",
			policy: Exponential(10*time.Millisecond, time.Second).WithJitter(messages.JitterEqual, 0),
			rand:   fixedRand(1),
			want:   ms(10, 20, 40, 80, 160, 320, 640, 1000, 1000),
		},
		{
			// The breaker's compare-and-set: d·(1±0.5), clamped to the cap.
			name:   "proportional jitter 0.5, highest draw",
			policy: Exponential(time.Millisecond, 50*time.Millisecond).WithJitter(messages.JitterProportional, 0.5),
			rand:   fixedRand(1),
			want:   ms(1.5, 3, 6, 12, 24, 48, 50, 50),
		},
		{
			name:   "proportional jitter 0.5, lowest draw",
			policy: Exponential(time.Millisecond, 50*time.Millisecond).WithJitter(messages.JitterProportional, 0.5),
			rand:   fixedRand(0),
			want:   ms(0.5, 1, 2, 4, 8, 16, 25, 25),
		},
		{
			// Decorrelated jitter grows from the previous delay, which Next carries.
			name:   "decorrelated jitter, highest draw",
			policy: Exponential(10*time.Millisecond, time.Second).WithJitter(messages.JitterDecorrelated, 0),
			rand:   fixedRand(1),
			want:   ms(30, 90, 270, 810, 1000, 1000),
		},
		{
			name:   "arguments clamped: negative initial, cap below initial",
			policy: Exponential(-time.Second, -time.Second),
			want:   ms(0, 0, 0),
		},
		{
			name:   "cap below initial is the initial delay",
			policy: Exponential(time.Second, time.Millisecond),
			want:   ms(1000, 1000),
		},
		{
			name:   "jitter factor clamped to [0, 1]",
			policy: Exponential(time.Second, time.Minute).WithJitter(messages.JitterProportional, math.NaN()),
			rand:   fixedRand(1),
			want:   ms(1000, 2000, 4000),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBackoff(tt.policy, tt.rand, nil)
			require.Equal(t, tt.want, nextN(b, len(tt.want)))
			require.Equal(t, len(tt.want), b.Retries())
			b.Reset()
			require.Zero(t, b.Retries())
			require.Equal(t, tt.want, nextN(b, len(tt.want)), "after Reset the timeline starts again")
		})
	}
}

func TestBackoffNeverOverflows(t *testing.T) {
	b := NewBackoff(Exponential(time.Nanosecond, math.MaxInt64), nil, nil)
	var last time.Duration
	for range 10_000 {
		d := b.Next()
		require.GreaterOrEqual(t, d, last)
		last = d
	}
	require.Equal(t, time.Duration(math.MaxInt64), last)

	b = NewBackoff(Exponential(time.Millisecond, time.Second), nil, nil)
	b.n = math.MaxInt // a loop that has run for ever
	require.Equal(t, time.Second, b.Next())
	require.Equal(t, math.MaxInt, b.Retries())
}

func TestBackoffWait(t *testing.T) {
	clk := &recordingClock{}
	b := NewBackoff(Exponential(100*time.Millisecond, 400*time.Millisecond), nil, clk)
	for range 4 {
		require.NoError(t, b.Wait(context.Background()))
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}, clk.waits)

	// A wait that would not end returns when its context does.
	clk = &recordingClock{block: true}
	b = NewBackoff(Exponential(time.Hour, time.Hour), nil, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// An ended context is reported before waiting at all.
	clk = &recordingClock{}
	require.ErrorIs(t, Sleep(ctx, clk, time.Hour), context.Canceled)
	require.Empty(t, clk.waits)
	require.ErrorIs(t, Sleep(ctx, nil, time.Hour), context.Canceled, "the system clock is not waited on either")
}

func TestExponentialDecides(t *testing.T) {
	// The policy is a Policy like any other: Decide and Plan work on it.
	p := Exponential(time.Second, 4*time.Second)
	require.Equal(t, messages.MaxAttempts, p.Attempts())
	require.Equal(t, "exponential base 2, initial 1s, max 4s, "+strconv.Itoa(messages.MaxAttempts)+" attempts, no jitter", p.String())
	d := p.Decide(t0, State{}, Failure{Err: errPlanned}, nil)
	require.Equal(t, ActionRetry, d.Action)
	require.Equal(t, time.Second, d.Delay)
}
