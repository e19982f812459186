package itemrun

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// A request is given up when the server has said nothing of it for two
// heartbeats (at least pullQuiet), or has not ended it pullGrace after its
// expiry; its messages and heartbeats keep it.
func TestPullRequestLost(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &pullRequest{left: 2, expires: t0.Add(10 * time.Second), silence: 2 * time.Second, heard: t0, got: t0}
	require.Empty(t, r.lost(t0.Add(2*time.Second)))
	require.Equal(t, "no heartbeat", r.lost(t0.Add(2*time.Second+time.Millisecond)))

	r.heard = t0.Add(9 * time.Second) // a heartbeat
	require.Empty(t, r.lost(t0.Add(10*time.Second+pullGrace)))
	require.Equal(t, "the server did not end it", r.lost(t0.Add(10*time.Second+pullGrace+time.Millisecond)))

	r = &pullRequest{left: 2, expires: t0.Add(10 * time.Second), silence: 2 * time.Second, heard: t0, got: t0}
	require.False(t, r.delivered(t0.Add(3*time.Second)))
	require.Empty(t, r.lost(t0.Add(5*time.Second)), "a message is heard too")
	require.True(t, r.delivered(t0.Add(4*time.Second)), "its batch is complete")
}

// The consumer's state is checked once per request, after pullQuiet
// without a message (heartbeats do not count).
func TestPullRequestQuiet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &pullRequest{left: 5, expires: t0.Add(10 * time.Second), silence: 2 * time.Second, heard: t0, got: t0}
	require.False(t, r.quiet(t0.Add(pullQuiet-time.Millisecond)))
	r.heard = t0.Add(pullQuiet) // a heartbeat
	require.True(t, r.quiet(t0.Add(pullQuiet)))
	r.checked = true
	require.False(t, r.quiet(t0.Add(5*time.Second)), "once per request")
}

func TestPullStuck(t *testing.T) {
	for _, tc := range []struct {
		name                string
		pending             uint64
		ackPending, waiting int
		maxAckPending       int
		want                bool
	}{
		{"no request at the server: ours is gone", 0, 0, 0, 100, true},
		{"work and room while ours waits", 5, 10, 1, 100, true},
		{"no work", 0, 10, 2, 100, false},
		{"work, but MaxAckPending reached: pulling again would not help", 5, 100, 1, 100, false},
		{"no MaxAckPending", 5, 100, 1, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ci := &jetstream.ConsumerInfo{NumPending: tc.pending, NumAckPending: tc.ackPending, NumWaiting: tc.waiting}
			ci.Config.MaxAckPending = tc.maxAckPending
			require.Equal(t, tc.want, pullStuck(ci))
		})
	}
}

func TestPullStatusErr(t *testing.T) {
	status := func(code, descr string) *nats.Msg {
		m := nats.NewMsg("_INBOX.x.1")
		m.Header.Set("Status", code)
		if descr != "" {
			m.Header.Set("Description", descr)
		}
		return m
	}
	for _, tc := range []struct {
		code, descr string
		want        error // nil: ended as asked, or a heartbeat
	}{
		{"100", "Idle Heartbeat", nil},
		{"404", "No Messages", nil},
		{"408", "Request Timeout", nil},
		{"409", "Batch Completed", nil},
		{"409", "Consumer Deleted", jetstream.ErrConsumerDeleted},
		{"409", "Leadership Change", jetstream.ErrConsumerLeadershipChanged},
		{"503", "", nats.ErrNoResponders},
		{"409", "Exceeded MaxWaiting", errPullRefused},
		{"400", "Bad Request", errPullRefused},
	} {
		m := status(tc.code, tc.descr)
		require.True(t, isStatus(m))
		err := statusErr(m)
		if tc.want == nil {
			require.NoError(t, err, tc.code+" "+tc.descr)
		} else {
			require.ErrorIs(t, err, tc.want, tc.code+" "+tc.descr)
		}
	}
	require.False(t, isStatus(&nats.Msg{Subject: "fleet.work.x", Data: []byte("{}")}))
}

func TestPullAPIPrefix(t *testing.T) {
	require.Equal(t, "$JS.API.", apiPrefix(jetstream.JetStreamOptions{}))
	require.Equal(t, "$JS.hub.API.", apiPrefix(jetstream.JetStreamOptions{Domain: "hub"}))
	require.Equal(t, "tenant.API.", apiPrefix(jetstream.JetStreamOptions{APIPrefix: "tenant.API"}))
	require.Equal(t, "tenant.API.", apiPrefix(jetstream.JetStreamOptions{APIPrefix: "tenant.API."}))
}
