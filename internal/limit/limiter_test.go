package limit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func newStore(t *testing.T, srv *natstest.Server) *limit.Store {
	t.Helper()
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "limits"})
	if err != nil {
		kv, err = js.KeyValue(context.Background(), "limits")
	}
	require.NoError(t, err)
	s, err := limit.NewStore(js, kv, nil, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// Two limiters (two agents) of 16 callers each share a limit of 6 slots;
// each call lasts 20 ms. The slots stay in use: the calls complete at a
// good part of 6/20ms, and never more than 6 run at once.
func TestLimiterConcurrency(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	s := newStore(t, srv)
	_, err := s.Set(context.Background(), "db", messages.LimitConfig{Concurrency: 6})
	require.NoError(t, err)
	calls, maxInFlight, _ := hammer(t, srv, 2*time.Second, 0)
	t.Logf("%d calls in 2 s (%.0f/s of at most %.0f/s), at most %d at once", calls, float64(calls)/2, 6/0.02, maxInFlight)
	require.LessOrEqual(t, maxInFlight, int64(6))
	rec, _, err := s.Get(context.Background(), limit.NamedKey("db"))
	require.NoError(t, err)
	require.Zero(t, rec.InFlight(time.Now()), "every slot back")
}

// The same with a rate of 40/s, burst 10: the rate binds.
func TestLimiterRateAndConcurrency(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	s := newStore(t, srv)
	_, err := s.Set(context.Background(), "db", messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6})
	require.NoError(t, err)
	calls, maxInFlight, _ := hammer(t, srv, 3*time.Second, 0)
	t.Logf("%d calls in 3 s (%.1f/s of 40/s), at most %d at once", calls, float64(calls)/3, maxInFlight)
	require.LessOrEqual(t, maxInFlight, int64(6))
	require.LessOrEqual(t, calls, int64(40*3+10))
}

// Two agents share a limit of 6 slots, and the first starts 300 ms before
// the second, time enough to hold every slot and hand each to its own
// next caller: once the second waits, the first gives slots back until
// they are spread evenly, so neither starves.
func TestLimiterFairBetweenAgents(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	s := newStore(t, srv)
	_, err := s.Set(context.Background(), "db", messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6})
	require.NoError(t, err)
	calls, maxInFlight, per := hammer(t, srv, 4*time.Second, 300*time.Millisecond)
	t.Logf("%d calls in 4 s, at most %d at once; first agent %d, second (300 ms late) %d", calls, maxInFlight, per[0], per[1])
	require.LessOrEqual(t, maxInFlight, int64(6))
	require.GreaterOrEqual(t, per[1], calls/4, "the late agent gets a fair part of the calls")
	require.GreaterOrEqual(t, per[0], calls/4)
}

// hammer runs two limiters (agents, each with its own store and
// connection) of 16 callers each, each call 20 ms, for d; the second
// starts late. per counts each agent's calls.
func hammer(t *testing.T, srv *natstest.Server, d, late time.Duration) (calls, maxInFlight int64, per [2]int64) {
	var inFlight, maxIn, n atomic.Int64
	var perAgent [2]atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for a := range 2 {
		l := limit.NewLimiter(newStore(t, srv), string(rune('a'+a)), nil, nil)
		defer l.Close() // the slots it holds for callers to come go back
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a == 1 {
					select {
					case <-ctx.Done():
					case <-time.After(late):
					}
				}
				for ctx.Err() == nil {
					tk, _, err := l.Acquire(ctx, limit.Acquire{Key: limit.NamedKey("db"), Label: "db", Lease: 10 * time.Second, MaxWait: time.Second})
					if err != nil || tk == nil {
						continue
					}
					k := inFlight.Add(1)
					for m := maxIn.Load(); k > m && !maxIn.CompareAndSwap(m, k); m = maxIn.Load() {
					}
					time.Sleep(20 * time.Millisecond)
					inFlight.Add(-1)
					n.Add(1)
					perAgent[a].Add(1)
					require.NoError(t, l.Release(context.Background(), tk, limit.Success))
				}
			}()
		}
	}
	wg.Wait()
	return n.Load(), maxIn.Load(), [2]int64{perAgent[0].Load(), perAgent[1].Load()}
}

// A cap far above what two agents of 16 callers run: they take their slots
// in batches and keep the slots of their finished calls, so that most
// calls cost no KV request at all (one compare-and-set and one release per
// call before slots were leased in batches); never more than the cap run
// at once, and every slot is back once the limiters close.
func TestLimiterLeasesSlotsOfARoomyCap(t *testing.T) {
	srv := natstest.RunServer(t)
	s := newStore(t, srv)
	_, err := s.Set(context.Background(), "roomy", messages.LimitConfig{Concurrency: 1000})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	var inFlight, maxIn, calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var limiters []*limit.Limiter
	for a := range 2 {
		l := limit.NewLimiter(newStore(t, srv), string(rune('a'+a)), nil, limit.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"agent": string(rune('a' + a))}, reg)))
		limiters = append(limiters, l)
		for range 16 {
			wg.Go(func() {
				for ctx.Err() == nil && calls.Load() < 4000 {
					tk, _, err := l.Acquire(ctx, limit.Acquire{Key: limit.NamedKey("roomy"), Label: "roomy", Lease: 10 * time.Second, MaxWait: time.Second})
					if err != nil || tk == nil {
						continue
					}
					k := inFlight.Add(1)
					for m := maxIn.Load(); k > m && !maxIn.CompareAndSwap(m, k); m = maxIn.Load() {
					}
					inFlight.Add(-1)
					calls.Add(1)
					require.NoError(t, l.Release(context.Background(), tk, limit.Success))
				}
			})
		}
	}
	wg.Wait()
	cancel()
	takes := counter(t, reg, "jetfleet_limit_takes_total")
	t.Logf("%d calls, %v takes, at most %d at once", calls.Load(), takes, maxIn.Load())
	require.LessOrEqual(t, maxIn.Load(), int64(32))
	require.Less(t, takes, float64(calls.Load())/10, "a take per call or so: slots are not leased in batches")
	rec, _, err := s.Get(context.Background(), limit.NamedKey("roomy"))
	require.NoError(t, err)
	require.LessOrEqual(t, rec.InFlight(time.Now()), 500, "more than half of the cap leased")
	for _, l := range limiters {
		l.Close()
	}
	rec, _, err = s.Get(context.Background(), limit.NamedKey("roomy"))
	require.NoError(t, err)
	require.Zero(t, rec.InFlight(time.Now()), "every slot back once the limiters close")
}

// counter sums a counter of reg over its labels.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// The record counts calls, not tokens leased: a take leases tokens for the
// agent's callers to come, and those no caller used (a capped limit's
// tokens beyond the slots the agent got, a batch that expired) go back to
// the limit, and out of its count, with the agent's next write. Two agents
// of 16 callers on a limit of 400/s and 6 slots (the slots bind: a take
// would lease 4 tokens for its waiting callers, who have 1 slot): once the
// limiters close, the record counts exactly the calls made and holds no
// slot.
func TestLimiterCountsCallsNotLeasedTokens(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	s := newStore(t, srv)
	_, err := s.Set(context.Background(), "db", messages.LimitConfig{Rate: 400, Burst: 80, Concurrency: 6})
	require.NoError(t, err)
	var calls atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var limiters []*limit.Limiter
	for a := range 2 {
		l := limit.NewLimiter(newStore(t, srv), string(rune('a'+a)), nil, nil)
		limiters = append(limiters, l)
		for range 16 {
			wg.Go(func() {
				for ctx.Err() == nil {
					// Not ctx: a take it ended on its way would be in doubt.
					tk, _, err := l.Acquire(context.Background(), limit.Acquire{Key: limit.NamedKey("db"), Label: "db", Lease: 10 * time.Second, MaxWait: time.Second})
					require.NoError(t, err)
					if tk == nil {
						continue
					}
					calls.Add(1)
					time.Sleep(5 * time.Millisecond)
					require.NoError(t, l.Release(context.Background(), tk, limit.Success))
				}
			})
		}
	}
	wg.Wait()
	for _, l := range limiters {
		l.Close()
	}
	rec, _, err := s.Get(context.Background(), limit.NamedKey("db"))
	require.NoError(t, err)
	t.Logf("%d calls; the record counts %d", calls.Load(), rec.Stats.Calls+rec.Stats.PrevCalls)
	require.Positive(t, calls.Load())
	require.Equal(t, int(calls.Load()), rec.Stats.Calls+rec.Stats.PrevCalls, "calls counted once each, leased tokens not")
	require.Zero(t, rec.InFlight(time.Now()), "every slot back: %+v", rec)
}
