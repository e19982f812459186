package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestSplit(t *testing.T) {
	cfg := messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6, Adaptive: true}
	tests := []struct {
		name    string
		cfg     messages.LimitConfig
		weights map[string]int
		pool    string
		active  []string
		want    messages.LimitConfig
	}{
		{name: "alone: all of it", cfg: cfg, pool: "a", want: cfg},
		{name: "alone among idle others", cfg: cfg, pool: "a", active: []string{"a"}, want: cfg},
		{name: "two pools: half each", cfg: cfg, pool: "a", active: []string{"b"},
			want: messages.LimitConfig{Rate: 20, Burst: 5, Concurrency: 3, Adaptive: true}},
		{name: "three pools: the cap by largest remainder, first in name order", cfg: messages.LimitConfig{Concurrency: 4}, pool: "a", active: []string{"b", "c"},
			want: messages.LimitConfig{Concurrency: 2}},
		{name: "three pools: the last in order", cfg: messages.LimitConfig{Concurrency: 4}, pool: "c", active: []string{"a", "b"},
			want: messages.LimitConfig{Concurrency: 1}},
		{name: "weights", cfg: cfg, weights: map[string]int{"a": 3}, pool: "a", active: []string{"b"},
			want: messages.LimitConfig{Rate: 30, Burst: 7, Concurrency: 5, Adaptive: true}},
		{name: "weights, the other side", cfg: cfg, weights: map[string]int{"a": 3}, pool: "b", active: []string{"a"},
			want: messages.LimitConfig{Rate: 10, Burst: 2, Concurrency: 1, Adaptive: true}},
		{name: "more pools than slots: one each", cfg: messages.LimitConfig{Concurrency: 1}, pool: "b", active: []string{"a"},
			want: messages.LimitConfig{Concurrency: 1}},
		{name: "a rate without a burst: a second of its part", cfg: messages.LimitConfig{Rate: 10}, pool: "a", active: []string{"b"},
			want: messages.LimitConfig{Rate: 5, Burst: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, limit.Split(tt.cfg, tt.weights, tt.pool, tt.active))
		})
	}
	// The parts of the rate add up to the rate, those of the cap to the cap.
	pools := []string{"a", "b", "c"}
	var rate float64
	var slots int
	for _, p := range pools {
		part := limit.Split(messages.LimitConfig{Rate: 100, Concurrency: 10}, map[string]int{"b": 2}, p, pools)
		rate += float64(part.Rate)
		slots += part.Concurrency
	}
	require.InDelta(t, 100, rate, 1e-9)
	require.Equal(t, 10, slots)
}

func TestShareKeys(t *testing.T) {
	k := limit.ShareKey("gpu", limit.NamedKey("api"))
	require.Equal(t, "p.gpu.n.api", k)
	pool, key, ok := limit.SplitShareKey(k)
	require.True(t, ok)
	require.Equal(t, "gpu", pool)
	require.Equal(t, "n.api", key)
	_, _, ok = limit.SplitShareKey("n.api")
	require.False(t, ok)
	name, named := limit.KeyName(k)
	require.True(t, named)
	require.Equal(t, "api", name)
}

// poolStore is a store of pool over the bucket limits, on its own
// connection, with clock clk.
func poolStore(t *testing.T, srv *natstest.Server, pool string, clk clock.Clock) *limit.Store {
	t.Helper()
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), "limits")
	require.NoError(t, err)
	s, err := limit.NewStore(js, kv, clk, zerolog.Nop(), limit.WithPool(pool))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// Two pools share a limit of 4 slots. Each spends its own share, in its
// own record: while both use the limit each may hold 2 slots; once pool b
// has been idle for ShareIdle, pool a may hold all 4. The limit's record
// keeps only its configuration.
func TestSharesBetweenPools(t *testing.T) {
	srv := natstest.RunServer(t)
	ops := newStore(t, srv) // creates the bucket; the operator's store
	ctx := context.Background()
	_, err := ops.Set(ctx, "api", messages.LimitConfig{Concurrency: 4})
	require.NoError(t, err)
	clk := clock.NewManual(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	a, b := poolStore(t, srv, "a", clk), poolStore(t, srv, "b", clk)
	key := limit.NamedKey("api")
	take := func(s *limit.Store, agent string) bool {
		t.Helper()
		g, _, err := s.Take(ctx, key, "", nil, limit.Request{Agent: agent, Tokens: 1, Slot: true, Lease: time.Minute})
		require.NoError(t, err)
		return g.Granted()
	}
	require.True(t, take(b, "b1"), "b takes a slot: b is active")
	limit.ReadShareView(ctx, a, key) // a's view of the shares, as its refresh reads it
	for range 2 {
		require.True(t, take(a, "a1"))
	}
	require.False(t, take(a, "a1"), "a holds its half")
	limit.ReadShareView(ctx, b, key) // b sees a busy now
	require.True(t, take(b, "b1"), "b's own half is untouched")
	require.False(t, take(b, "b1"))

	require.NoError(t, b.Release(ctx, key, "b1", 2, limit.Neutral, time.Minute))
	clk.Advance(limit.ShareIdle + time.Second)
	limit.ReadShareView(ctx, a, key)
	for range 2 {
		require.True(t, take(a, "a1"), "b's idle share moved to a")
	}
	require.False(t, take(a, "a1"), "the whole cap")

	shares, err := ops.Shares(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 4, shares["a"].InFlight(clk.Now()))
	require.Equal(t, 0, shares["b"].InFlight(clk.Now()))
	rec, ok, err := ops.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, rec.Holders, "no pool writes the limit's own record")

	require.NoError(t, ops.Delete(ctx, key))
	shares, err = ops.Shares(ctx, key)
	require.NoError(t, err)
	require.Empty(t, shares, "the shares go with the limit")
	limit.ReadShareView(ctx, a, key)
	_, _, err = a.Take(ctx, key, "", nil, limit.Request{Agent: "a1", Tokens: 1, Slot: true, Lease: time.Minute})
	require.ErrorIs(t, err, limit.ErrNotFound)
}
