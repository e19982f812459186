package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
)

func TestTokenBucketPacesWithoutSleeping(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rate      float64
		burst     int
		n         int
		wantTotal time.Duration
		wantWaits int
	}{
		{"5/s, 10 items: the first goes at once, 9 wait 200ms", 5, 1, 10, 9 * 200 * time.Millisecond, 9},
		{"100/s, 1 item", 100, 1, 1, 0, 0},
		{"2/s, burst 3: three at once, then 500ms each", 2, 3, 7, 4 * 500 * time.Millisecond, 4},
		{"0.5/s: one every 2s", 0.5, 1, 4, 6 * time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			b, err := dlq.NewTokenBucket(tc.rate, tc.burst, clk)
			require.NoError(t, err)
			// The bucket starts full: a burst is available at once.
			for range tc.n {
				require.NoError(t, b.Wait(context.Background()))
			}
			require.Equal(t, tc.wantTotal, clk.elapsed(start))
			require.Len(t, clk.waits, tc.wantWaits)
			for _, w := range clk.waits {
				require.Equal(t, b.Interval(), w, "every wait is exactly one interval")
			}
		})
	}
}

func TestTokenBucketIdleEarnsAtMostBurst(t *testing.T) {
	clk := newFakeClock()
	b, err := dlq.NewTokenBucket(10, 2, clk)
	require.NoError(t, err)
	require.NoError(t, b.Wait(context.Background()))
	clk.After(time.Hour) // idle for an hour
	clk.waits = nil
	for range 4 {
		require.NoError(t, b.Wait(context.Background()))
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, clk.waits,
		"two tokens were banked, the next two wait")
}

// stuckClock never fires: a wait can only end by cancellation.
type stuckClock struct{ fakeClock }

func (c *stuckClock) After(time.Duration) <-chan time.Time { return nil }

func TestTokenBucketCancelled(t *testing.T) {
	clk := &stuckClock{*newFakeClock()}
	b, err := dlq.NewTokenBucket(1, 1, clk)
	require.NoError(t, err)
	require.NoError(t, b.Wait(context.Background()), "the first token is free")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, b.Wait(cancelled), context.Canceled, "a cancelled context never waits")
}

func TestTokenBucketRejectsBadRates(t *testing.T) {
	for _, rate := range []float64{0, -1, dlq.MaxRate * 2} {
		_, err := dlq.NewTokenBucket(rate, 1, nil)
		require.Error(t, err, "rate %v", rate)
	}
	_, err := dlq.NewTokenBucket(1, 0, nil)
	require.Error(t, err)
	l, err := dlq.LimiterFor(0, nil)
	require.NoError(t, err)
	require.Nil(t, l, "rate 0 is unpaced")
}
