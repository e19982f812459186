package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/auth/authtest"
	"github.com/jetfleet/jetfleet/internal/jobrun"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// A pool whose dead-letter stream the server cannot reserve its quota for
// (poolb's 40 MiB and poola's 40 MiB do not both fit in 64 MiB): poola's
// job is accepted and runs, but its agent, whose key names only its
// pool's dead-letter stream, cannot dead-letter and keeps the item; the
// job does not move. The operator is told why: a DLQPoolMissing event,
// the missing gauge, dlq stats' pools. Once there is room (the
// coordinator restarted with an 8 MiB quota), the leading coordinator
// makes the stream by itself, the item is dead-lettered and the job ends.
func TestPoolWithoutItsDeadLetterStream(t *testing.T) {
	t.Parallel()
	o := auth.Options{Pools: []string{"poola", "poolb"}}
	srv, res := authtest.RunServer(t, o, natstest.WithConfig(func(so *server.Options) { so.JetStreamMaxStore = 64 << 20 }))
	s := &secured{srv: srv, res: res, names: messages.MustNames(o.Prefix), refused: make(chan error, 1024)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := s.names
	prov := provision.Config{AckWait: 5 * time.Second, DLQMaxBytes: 40 << 20}

	cnc, _ := s.connect(t, "coordinator")
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	creg := prometheus.NewRegistry()
	runCoordinator := func(prov provision.Config, reg *prometheus.Registry) (stop func()) {
		nc, _ := s.connect(t, "coordinator")
		coord, err := coordinator.New(nc, coordinator.Config{StatusInterval: 20 * time.Millisecond,
			Provision: coordinator.Provision(prov), Registerer: reg, DLQMonitorInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		rctx, rstop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- coord.Run(rctx) }()
		<-coord.Ready()
		return func() {
			rstop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}
	}
	stopCoord := runCoordinator(prov, creg)
	_, err = provision.EnsurePool(ctx, cjs, names, "poolb", prov)
	require.NoError(t, err)

	onc, _ := s.connect(t, "operator")
	missing := make(chan messages.DLQStreamState, 16)
	_, err = onc.Subscribe(names.EventSubject(jobrun.DLQEventsJob, "*"), func(m *nats.Msg) {
		var ev struct {
			Type string                  `json:"type"`
			Data messages.DLQStreamState `json:"data"`
		}
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type == "DLQPoolMissing" {
			missing <- ev.Data
		}
	})
	require.NoError(t, err)
	require.NoError(t, onc.Flush())
	op, err := client.New(onc, "")
	require.NoError(t, err)

	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "a", "pool": "poola", "items": [`+items(1)+`], "agent_template": [{"handler": "broken"}]}`))
	require.NoError(t, err, "accepted: its pool has no dead-letter stream, and the job runs")

	// The agent starts once the pool has its consumer (the job is
	// accepted).
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := cjs.Consumer(ctx, names.WorkStream(), names.AgentsConsumer("poola"))
		return err
	})
	anc, _ := s.connect(t, auth.AgentUser("poola"))
	areg := prometheus.NewRegistry()
	broken := func(context.Context, *agent.Call) (any, error) { return nil, retry.Permanent(errors.New("broken")) }
	aa := agent.New(anc, agent.Config{Pool: "poola", Concurrency: 2, ShutdownTimeout: time.Second, Registerer: areg}).Handle("broken", broken)
	actx, astop := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- aa.Run(actx) }()

	// The item is kept, not lost; the operator is told why.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := plainCounter(t, areg, "jetfleet_agent_dlq_publish_failures_total"); n < 1 {
			return fmt.Errorf("%v failed dead-letter publishes", n)
		}
		return nil
	})
	select {
	case ev := <-missing:
		require.Equal(t, "poola", ev.Pool)
		require.Contains(t, ev.Problem, wire.PoolDLQStream(names, "poola"))
		require.Contains(t, ev.Problem, "--dlq-max-bytes")
	case <-ctx.Done():
		t.Fatal("no DLQPoolMissing event for poola")
	}
	require.EqualValues(t, 1, gauge(t, creg, "jetfleet_dlq_pool_stream_missing", "pool", "poola"))
	stats, err := op.DLQStats(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Len(t, stats.Pools, 2, "%+v", stats.Pools)
	require.Equal(t, "poola", stats.Pools[0].Pool)
	require.Contains(t, stats.Pools[0].Problem, "no dead-letter stream")
	require.Empty(t, stats.Pools[1].Problem)
	a, err := sub.JobStatus(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, a.State, "%+v", a)
	require.Zero(t, a.Done(), "%+v", a)

	// The operator's fix: the coordinator restarted with a quota that
	// fits. It makes the pool's stream without waiting for another job.
	stopCoord()
	creg2 := prometheus.NewRegistry()
	prov.DLQMaxBytes = 8 << 20
	defer runCoordinator(prov, creg2)()
	a, err = sub.JobWait(ctx, "a", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateFailed, a.State, "%+v", a)
	require.EqualValues(t, 1, a.DeadLettered, "%+v", a)
	info, err := cjs.Stream(ctx, wire.PoolDLQStream(names, "poola"))
	require.NoError(t, err)
	require.EqualValues(t, 8<<20, info.CachedInfo().Config.MaxBytes)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if v := gauge(t, creg2, "jetfleet_dlq_pool_stream_missing", "pool", "poola"); v != 0 {
			return fmt.Errorf("missing gauge %v", v)
		}
		return nil
	})
	astop()
	if err := <-adone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
