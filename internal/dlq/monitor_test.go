package dlq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The monitor sets the gauges at every check and warns once per crossing
// of 80% of a pool's quota, again only after it fell below.
func TestMonitorWarnsOncePerCrossing(t *testing.T) {
	f := newFleet(t, provision.Config{DLQMaxMsgs: 10})
	m := dlq.NewMetrics(prometheus.NewRegistry())
	now := time.Now()
	var warned []dlq.Usage
	mon := dlq.NewMonitor(f.js, names, m, dlq.MonitorConfig{
		Now:    func() time.Time { return now },
		OnWarn: func(u dlq.Usage) { warned = append(warned, u) },
	})
	ctx := testCtx(t, 30*time.Second)
	// The pool's quota (its dead-letter stream) is what fills; the DLQ
	// stream's gauges follow once it has sourced the entries.
	check := func() *dlq.Usage {
		_, err := mon.Check(ctx)
		require.NoError(t, err)
		pools, err := mon.CheckPools(ctx)
		require.NoError(t, err)
		require.Len(t, pools, 1)
		require.Equal(t, "default", pools[0].Pool)
		return &pools[0]
	}
	u := check()
	require.Zero(t, u.Messages)
	require.Zero(t, value(t, m.OldestAge))

	for i := range 7 {
		f.write(t, entry("m", i, "error", "x"))
	}
	now = time.Now().Add(time.Minute)
	u = check()
	require.EqualValues(t, 7, u.Messages)
	require.InDelta(t, 0.7, u.FillRatio, 1e-9)
	require.Empty(t, warned)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := mon.Check(ctx); err != nil {
			return err
		}
		if d := value(t, m.Depth); d != 7 {
			return fmt.Errorf("depth %v", d)
		}
		return nil
	})
	require.Positive(t, value(t, m.Bytes))
	require.InDelta(t, 60, value(t, m.OldestAge), 5)

	f.write(t, entry("m", 7, "error", "x"))
	check()
	require.Len(t, warned, 1, "80% reached")
	require.InDelta(t, 0.8, warned[0].FillRatio, 1e-9)
	f.write(t, entry("m", 8, "error", "x"))
	check()
	require.Len(t, warned, 1, "still above: no second warning")

	purged, err := dlq.NewInspector(f.js, names).Purge(ctx, messages.DLQFilter{Limit: 5})
	require.NoError(t, err)
	require.EqualValues(t, 5, purged)
	check()
	for i := 9; i < 13; i++ {
		f.write(t, entry("m", i, "error", "x"))
	}
	check()
	require.Len(t, warned, 2, "fell below, crossed again")
}

func TestReasonLabelIsBounded(t *testing.T) {
	require.Equal(t, messages.ReasonMaxDeliveries, dlq.ReasonLabel(messages.ReasonMaxDeliveries))
	require.Equal(t, "other", dlq.ReasonLabel("something-"+time.Now().String()))
	require.Equal(t, "unknown", dlq.ReasonLabel(""))
}

func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

// A pool whose dead-letter stream the server cannot reserve its quota for
// has agents (its work consumer) and no stream: the monitor reports it
// after two checks in a row, with why and what to do, sets its gauge,
// warns once, and lets it go once the stream exists; dlq stats lists it.
func TestMonitorReportsAPoolWithoutItsDeadLetterStream(t *testing.T) {
	srv := natstest.RunServer(t, natstest.WithConfig(func(o *server.Options) { o.JetStreamMaxStore = 56 << 20 }))
	ctx := testCtx(t, 30*time.Second)
	js := srv.JS()
	cfg := provision.Config{DLQMaxBytes: 16 << 20}
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	for _, pool := range []string{"a", "b", "c"} {
		_, err := provision.EnsurePool(ctx, js, names, pool, cfg)
		require.NoError(t, err)
	}
	_, err := provision.EnsurePool(ctx, js, names, "d", cfg)
	require.ErrorIs(t, err, provision.ErrDLQReservation)

	m := dlq.NewMetrics(prometheus.NewRegistry())
	var warned []dlq.Usage
	mon := dlq.NewMonitor(js, names, m, dlq.MonitorConfig{OnWarn: func(u dlq.Usage) { warned = append(warned, u) }})
	check := func() dlq.Usage {
		pools, err := mon.CheckPools(ctx)
		require.NoError(t, err)
		require.Len(t, pools, 4)
		require.Equal(t, "d", pools[3].Pool)
		return pools[3]
	}
	u := check()
	require.Contains(t, u.Problem, "no dead-letter stream FLEET_DLQ_d")
	require.Empty(t, warned, "one check: the coordinator may be making it")
	require.Zero(t, value(t, m.PoolMissing.WithLabelValues("d")))
	check()
	require.Len(t, warned, 1)
	require.Equal(t, "d", warned[0].Pool)
	for _, want := range []string{"--dlq-max-bytes", "max_file_store", "keep those items"} {
		require.Contains(t, warned[0].Problem, want)
	}
	require.EqualValues(t, 1, value(t, m.PoolMissing.WithLabelValues("d")))
	check()
	require.Len(t, warned, 1, "still missing: no second warning")

	states, err := dlq.NewInspector(js, names).PoolStates(ctx)
	require.NoError(t, err)
	require.Len(t, states, 4)
	require.Equal(t, messages.DLQStreamState{Pool: "d", Problem: u.Problem}, states[3])
	require.Empty(t, states[0].Problem)

	// The operator's fix: a smaller quota; the pool is provisioned again.
	_, err = provision.EnsurePool(ctx, js, names, "d", provision.Config{DLQMaxBytes: 4 << 20})
	require.NoError(t, err)
	u = check()
	require.Empty(t, u.Problem)
	require.EqualValues(t, 4<<20, u.MaxBytes)
	require.Zero(t, value(t, m.PoolMissing.WithLabelValues("d")))
}
