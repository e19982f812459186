package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
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

// Each pool dead-letters within a quota of its own: pool poola's agent key
// fills poola's quota with large forged entries (as the review did to the
// shared DLQ stream, which then refused every pool), and cannot write past
// it into the DLQ stream or into poolb's quota. Pool poolb's failing job
// still dead-letters its 3 items and ends failed with exact counts. Pool
// poola's own failing item is not lost: its agent keeps it (a delayed nak,
// counted as a failed dead-letter publish), its job stays running, and
// the operator sees poola's quota full (dlq stats, the pool's fill ratio
// metric, a dlq_nearly_full event naming the pool). Once the operator
// purges the forged entries, which frees the pool's quota, the item is
// dead-lettered and its job ends failed.
func TestDeadLetterQuotaIsPerPool(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"poola", "poolb"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := s.names
	const quota = 2 << 20
	prov := provision.Config{AckWait: 5 * time.Second, DLQMaxBytes: quota}

	cnc, cerrs := s.connect(t, "coordinator")
	creg := prometheus.NewRegistry()
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond,
		Provision: coordinator.Provision(prov), Registerer: creg, DLQMonitorInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	for _, p := range []string{"poola", "poolb"} {
		_, err = provision.EnsurePool(ctx, cjs, names, p, prov)
		require.NoError(t, err)
	}

	// The operator hears the DLQ's events.
	onc, _ := s.connect(t, "operator")
	warned := make(chan messages.DLQStreamState, 16)
	_, err = onc.Subscribe(names.EventSubject(jobrun.DLQEventsJob, "*"), func(m *nats.Msg) {
		var ev struct {
			Data messages.DLQStreamState `json:"data"`
		}
		if json.Unmarshal(m.Data, &ev) == nil && ev.Data.Pool != "" {
			warned <- ev.Data
		}
	})
	require.NoError(t, err)
	require.NoError(t, onc.Flush())
	op, err := client.New(onc, "")
	require.NoError(t, err)

	// Pool poola's agent key, hostile: 256 KiB entries until its quota
	// refuses one.
	anc, aerrs := s.connect(t, auth.AgentUser("poola"))
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	big := strings.Repeat("x", 256<<10)
	forged := 0
	for size := len(big); size >= 256; forged++ {
		require.Less(t, forged, 256, "poola's quota never refused an entry")
		m := nats.NewMsg(wire.PoolDLQSubject(names, "poola", "forged"))
		m.Data = mustJSON(t, messages.DLQEntry{JobID: "forged", ItemID: fmt.Sprint(forged), Reason: "forged", Error: big[:size]})
		_, err := ajs.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprint("forged/", forged)))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			// Full for entries this large: smaller ones, down to a
			// quarter of a kilobyte, until it is full for those too.
			require.Contains(t, apiErr.Description, "maximum bytes exceeded")
			size /= 4
			forged--
			continue
		}
		require.NoError(t, err)
	}
	require.Greater(t, forged, 4)
	refused := func(what, subject string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = mustJSON(t, messages.DLQEntry{JobID: "forged", ItemID: what, Reason: "forged", Error: big})
		refusedWrite(t, aerrs.perm, what, subject, func(ctx context.Context) error {
			_, err := ajs.PublishMsg(ctx, m)
			return err
		})
	}
	refused("past its quota, into the DLQ stream", names.DLQSubject("poola", "forged"))
	refused("into poolb's quota", wire.PoolDLQSubject(names, "poolb", "forged"))

	broken := func(context.Context, *agent.Call) (any, error) { return nil, retry.Permanent(errors.New("broken")) }
	areg := prometheus.NewRegistry()
	aa := agent.New(anc, agent.Config{Pool: "poola", Concurrency: 4, ShutdownTimeout: time.Second, Registerer: areg}).Handle("broken", broken)
	go func() { done <- aa.Run(runCtx) }()
	bnc, berrs := s.connect(t, auth.AgentUser("poolb"))
	ba := agent.New(bnc, agent.Config{Pool: "poolb", Concurrency: 4, ShutdownTimeout: time.Second}).Handle("broken", broken)
	go func() { done <- ba.Run(runCtx) }()

	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	for _, spec := range []string{
		`{"id": "b", "pool": "poolb", "items": [` + items(3) + `], "agent_template": [{"handler": "broken"}]}`,
		`{"id": "a", "pool": "poola", "items": [` + items(1) + `], "agent_template": [{"handler": "broken"}]}`,
	} {
		_, err := sub.JobSubmit(ctx, []byte(spec))
		require.NoError(t, err)
	}
	st, err := sub.JobWait(ctx, "b", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateFailed, st.State, "%+v", st)
	require.EqualValues(t, 3, st.DeadLettered, "%+v", st)

	// Pool poola's item is kept, not lost: its dead letter was refused,
	// and the operator is told.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := plainCounter(t, areg, "jetfleet_agent_dlq_publish_failures_total"); n < 1 {
			return fmt.Errorf("%v failed dead-letter publishes", n)
		}
		return nil
	})
	select {
	case ev := <-warned:
		require.Equal(t, "poola", ev.Pool)
		require.GreaterOrEqual(t, ev.FillRatio, 0.8)
	case <-ctx.Done():
		t.Fatal("no dlq_nearly_full event for poola")
	}
	require.GreaterOrEqual(t, gauge(t, creg, "jetfleet_dlq_pool_fill_ratio", "pool", "poola"), 0.8)
	var stats *messages.DLQStats
	natstest.WaitFor(t, 30*time.Second, func() error {
		stats, err = op.DLQStats(ctx, messages.DLQFilter{})
		if err != nil {
			return err
		}
		if stats.ByJob["b"] != 3 || stats.ByJob["forged"] != int64(forged) {
			return fmt.Errorf("by job %v", stats.ByJob)
		}
		return nil
	})
	require.Len(t, stats.Pools, 2, "%+v", stats.Pools)
	require.Equal(t, "poola", stats.Pools[0].Pool)
	require.EqualValues(t, forged, stats.Pools[0].Messages)
	require.EqualValues(t, quota, stats.Pools[0].MaxBytes)
	require.Equal(t, "poolb", stats.Pools[1].Pool)
	require.EqualValues(t, 3, stats.Pools[1].Messages)
	a, err := sub.JobStatus(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, a.State, "%+v", a)
	require.Zero(t, a.Done(), "%+v", a)

	// The operator purges the forged entries: poola's quota is free again,
	// and its item is dead-lettered.
	n, err := op.DLQPurge(ctx, messages.DLQPurgeRequest{DLQFilter: messages.DLQFilter{JobID: "forged"}, Confirm: true})
	require.NoError(t, err)
	require.EqualValues(t, forged, n)
	a, err = sub.JobWait(ctx, "a", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateFailed, a.State, "%+v", a)
	require.EqualValues(t, 1, a.DeadLettered, "%+v", a)
	natstest.WaitFor(t, 30*time.Second, func() error {
		states, err := op.DLQStats(ctx, messages.DLQFilter{})
		if err != nil {
			return err
		}
		if p := states.Pools[0]; p.Messages != 1 {
			return fmt.Errorf("poola's quota holds %d entries", p.Messages)
		}
		return nil
	})

	stop()
	for range 3 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	require.Empty(t, cerrs.violations())
	require.Empty(t, berrs.violations(), "poolb's agent needs nothing it is refused")
}

// gauge reads a gauge of reg with one label pair.
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// plainCounter reads a counter of reg without labels.
func plainCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
