package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrefetchGrowsForShortItemsAndShrinksForLongOnes(t *testing.T) {
	p := newPrefetch(Config{Concurrency: 8})
	require.Equal(t, 8, p.want(), "nothing known yet: Concurrency")

	for range 50 {
		p.observe(50 * time.Microsecond)
	}
	require.Equal(t, MaxPrefetch, p.want(), "no-op items: as many as allowed")

	for range 100 {
		p.observe(100 * time.Millisecond)
	}
	// 8 workers × 250ms / ~100ms: about 20 messages, each waiting ~250ms.
	require.InDelta(t, 20, p.want(), 2)

	for range 100 {
		p.observe(time.Minute)
	}
	require.Equal(t, 8, p.want(), "long items: never below Concurrency")
}

// One slow item shrinks the buffer at once (the safe side); fast items
// grow it back over a few dozen items.
func TestPrefetchShrinksAtOnceAndGrowsBack(t *testing.T) {
	p := newPrefetch(Config{Concurrency: 4})
	for range 100 {
		p.observe(10 * time.Millisecond) // 4 × 250 / 10 = 100
	}
	require.Equal(t, 100, p.want())
	p.observe(10 * time.Second) // the average: 10ms + (10s - 10ms) / 8
	require.Equal(t, 4, p.want())
	for range 100 {
		p.observe(10 * time.Millisecond)
	}
	require.InDelta(t, 100, p.want(), 2)
}

func TestPrefetchFixed(t *testing.T) {
	p := newPrefetch(Config{Concurrency: 8, Prefetch: 3})
	p.observe(time.Microsecond)
	require.Equal(t, 3, p.want())
	require.Equal(t, 3, p.request(0))
	require.Equal(t, 0, p.request(2), "more than half full: no pull yet")
	require.Equal(t, 2, p.request(1))
}

// The pull loop asks for what the buffer lacks, and only once it is half
// empty, so that pull requests stay few however fast items go.
func TestPrefetchRequestsOnceHalfEmpty(t *testing.T) {
	p := newPrefetch(Config{Concurrency: 8})
	for range 10 {
		p.observe(time.Microsecond)
	}
	require.Equal(t, MaxPrefetch, p.request(0))
	require.Equal(t, 0, p.request(MaxPrefetch/2+1))
	require.Equal(t, MaxPrefetch/2, p.request(MaxPrefetch/2))
}

func TestConfigPrefetchBounds(t *testing.T) {
	for _, tc := range []struct {
		prefetch int
		ok       bool
	}{{0, true}, {1, true}, {MaxPrefetchFixed, true}, {-1, false}, {MaxPrefetchFixed + 1, false}} {
		err := Config{Prefetch: tc.prefetch}.WithDefaults().Validate()
		if tc.ok {
			require.NoError(t, err, "prefetch %d", tc.prefetch)
		} else {
			require.ErrorContains(t, err, "prefetch:", "prefetch %d", tc.prefetch)
		}
	}
}
