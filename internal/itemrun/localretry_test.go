package itemrun

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// gatedTimer is a timer of a test: it fires when the test calls fire, and
// never on its own.
type gatedTimer struct {
	f       func()
	stopped bool
}

func (g *gatedTimer) Stop() bool { g.stopped = true; return true }

// A local retry waits until its timer fires, then is handed to the pull
// loop in the order local retries came due; closing the queue naks what
// waits with the delay it has left and what is due with the least delay,
// and a local retry added after that is refused (the caller naks it).
func TestLocalRetriesHandOverWhatIsDueAndNakTheRestAtClose(t *testing.T) {
	var mu sync.Mutex
	clock := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	var timers []*gatedTimer
	var delays []time.Duration
	q := newLocalRetries()
	q.now = now
	q.afterFunc = func(d time.Duration, f func()) interface{ Stop() bool } {
		g := &gatedTimer{f: f}
		timers, delays = append(timers, g), append(delays, d)
		return g
	}
	sink := make(chan sentNak, 8)
	msg := func(id int) *localRetry { return &localRetry{Msg: &sinkMsg{id: id, sink: sink}} }

	r1, r2, r3 := msg(1), msg(2), msg(3)
	require.True(t, q.add(r1, 10*time.Millisecond))
	require.True(t, q.add(r2, 30*time.Millisecond))
	require.True(t, q.add(r3, 500*time.Millisecond))
	require.Equal(t, []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 500 * time.Millisecond}, delays)
	select {
	case <-q.ready():
		t.Fatal("ready before any timer fired")
	default:
	}
	require.Empty(t, q.take())

	advance(30 * time.Millisecond)
	timers[1].f() // r2's timer first: due in the order the timers fire
	timers[0].f()
	<-q.ready()
	require.Equal(t, []*localRetry{r2, r1}, q.take())
	require.Empty(t, q.take(), "taken once")

	r4 := msg(4)
	require.True(t, q.add(r4, 20*time.Millisecond))
	advance(20 * time.Millisecond)
	timers[3].f() // due, not yet taken when the agent stops
	advance(50 * time.Millisecond)
	q.close()
	require.Equal(t, map[int]time.Duration{3: 400 * time.Millisecond, 4: time.Millisecond}, takeNaks(sink, 2),
		"r3 waited 100 of its 500 ms; r4 was due: the least delay, never a bare nak")
	require.True(t, timers[2].stopped)
	timers[2].f() // a timer that fires after close changes nothing
	require.Empty(t, q.take())
	require.Empty(t, sink)

	require.False(t, q.add(msg(5), 10*time.Millisecond), "closed: the caller naks")
	var none *localRetries
	require.Nil(t, none.ready(), "no queue: never ready")
}

// An agent that stops while a local retry waits gives the item back with
// the delay it has left: another agent of the pool runs it, and not
// before the delay. (AckWait is longer than the test may take: an item
// not given back would never reach the second agent in time.)
func TestLocalRetryWaitingAtShutdownGoesToAnotherAgent(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	ctx := testCtx(t, 60*time.Second)
	prov := provision.Config{AckWait: 5 * time.Minute}
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{Provision: coordinator.Provision(prov)})

	const delay = 800 * time.Millisecond
	reg := prometheus.NewRegistry()
	failedAt := make(chan time.Time, 1)
	first := New(srv.Connect(t), Config{Name: "first", Registerer: reg, ShutdownTimeout: 5 * time.Second}).
		Handle("step", func(context.Context, *Call) (any, error) {
			failedAt <- time.Now()
			return nil, errors.New("downstream unavailable")
		})
	stopFirst := runAgent(t, ctx, first)

	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, []byte(`{"id": "handover", "items": [{"id": "x"}],
		"agent_template": [{"handler": "step", "retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "800ms"}}]}`))
	require.NoError(t, err)
	t1 := <-failedAt
	require.Eventually(t, func() bool { return counter(t, reg, "jetfleet_agent_local_retries_total") == 1 },
		10*time.Second, 5*time.Millisecond, "the retry waits in the first agent")
	stopFirst()

	ranAt := make(chan time.Time, 1)
	attempt := make(chan int, 1)
	second := New(srv.Connect(t), Config{Name: "second", ShutdownTimeout: 5 * time.Second}).
		Handle("step", func(_ context.Context, c *Call) (any, error) {
			ranAt <- time.Now()
			attempt <- c.Attempt
			return "ok", nil
		})
	defer runAgent(t, ctx, second)()

	st, err := cl.JobWait(ctx, "handover", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 1, st.Retries)
	require.GreaterOrEqual(t, (<-ranAt).Sub(t1), delay, "never before the delay")
	// The first agent wrote the state it held (the failed attempt) before
	// it handed the message back: the second runs attempt 2, the last.
	require.Equal(t, 2, <-attempt)
}

// Local retries write the item's state once, as the delivery leaves the
// agent, and lose nothing on the way: an item whose every run fails, with
// 6 attempts, runs 4 times in its first delivery (3 local retries, then
// the 4th retry is a delayed nak: one state write) and twice in the next
// (then it gives up: the second write). The dead letter holds all six
// attempts, in order, and the job counts five retries.
func TestLocalRetriesWriteTheStateAsTheDeliveryLeaves(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	ctx := testCtx(t, 60*time.Second)
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{})
	reg := prometheus.NewRegistry()
	var (
		mu   sync.Mutex
		runs []int
	)
	a := New(srv.Connect(t), Config{Name: "a1", Registerer: reg}).
		Handle("step", func(_ context.Context, c *Call) (any, error) {
			mu.Lock()
			runs = append(runs, c.Attempt)
			mu.Unlock()
			return nil, errors.New("downstream unavailable")
		})
	defer runAgent(t, ctx, a)()

	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, []byte(`{"id": "writes", "items": [{"id": "x"}],
		"agent_template": [{"handler": "step", "retry_config": {"attempts": 6, "backoff": "fixed", "initial_delay": "10ms"}}]}`))
	require.NoError(t, err)
	st, err := cl.JobWait(ctx, "writes", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.EqualValues(t, 5, st.Retries, "%+v", st)
	mu.Lock()
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, runs)
	mu.Unlock()
	require.Equal(t, 4.0, counter(t, reg, "jetfleet_agent_local_retries_total"), "retries 1–3 local, the 4th a nak, the 5th local")

	js, err := jetstream.New(srv.Connect(t))
	require.NoError(t, err)
	items, err := js.Stream(ctx, "KV_"+testNames.ItemsBucket())
	require.NoError(t, err)
	require.EqualValues(t, 2, items.CachedInfo().State.LastSeq, "one state write as delivery 1 left the agent, one at the give-up")

	dl, err := cl.DLQList(ctx, messages.DLQFilter{JobID: "writes"})
	require.NoError(t, err)
	require.Len(t, dl.Entries, 1)
	var attempts []int
	for _, h := range dl.Entries[0].Entry.Attempts {
		attempts = append(attempts, h.Attempt)
	}
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, attempts, "the dead letter's history")
}
