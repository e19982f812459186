package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natsconn"
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

// An agent that saw no item end for a while forgets their time: the next
// job's items may be far longer, and a buffer sized by no-op items would
// take a whole burst of them while other agents have none. Requests sized
// by the average end when it would go stale.
func TestPrefetchForgetsAfterIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPrefetch(Config{Concurrency: 8})
	p.now = func() time.Time { return now }
	for range 50 {
		p.observe(50 * time.Microsecond)
	}
	require.Equal(t, MaxPrefetch, p.want())
	require.Equal(t, prefetchStale, p.expiry(MaxPrefetch))

	now = now.Add(prefetchStale)
	require.Equal(t, MaxPrefetch, p.want(), "busy within the last second: still known")
	now = now.Add(time.Millisecond)
	require.Equal(t, 8, p.want(), "idle for over a second: Concurrency, as at the start")
	require.Equal(t, natsconn.PullExpiry, p.expiry(8), "a Concurrency-sized request waits as long as ever")

	p.observe(50 * time.Millisecond) // the first item of the next job, taken as it is
	require.Equal(t, 40, p.want(), "8 x 250ms / 50ms")
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
