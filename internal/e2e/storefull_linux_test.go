//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// TestStoreFullMidJob: the server's store (max_file_store) fills up in the
// middle of a job (its later items wait for it). A submission is refused with store_full, at once, and
// never accepted; status says why the job does not move (store_full: no
// coordinator can write the lease), and so does the coordinator's gauge;
// results and publication wait. Once there is room again, the job ends
// with every item counted once, and the refused submission is no job.
func TestStoreFullMidJob(t *testing.T) {
	t.Parallel() // its own server or cluster; no rate or fault timing
	const n, id = 600, "full"
	srv := fleettest.RunServer(t, fleettest.WithConfig(func(o *server.Options) { o.JetStreamMaxStore = 256 << 20 }))
	reg := prometheus.NewRegistry()
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), StatusInterval: 50 * time.Millisecond, Registerer: reg})
	// Items from i100 on wait until the store is full: the job is
	// mid-way then, however slowly the store fills.
	filled := make(chan struct{})
	gated := func(ctx context.Context, c *agent.Call) (any, error) {
		var i int
		if _, err := fmt.Sscanf(c.ItemID, "i%d", &i); err == nil && i >= 100 {
			select {
			case <-filled:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return "ok", nil
	}
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a0", Concurrency: 4}, testhooks.Agent{Provision: calmProvision}),
		map[string]agent.HandlerFunc{"slow": gated})
	cl := client(t, srv)
	submit(t, cl, fmt.Sprintf(`{"id": %q, "items": %s, "agent_template": [{"handler": "slow"}]}`, id,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("i%d", i)} })))
	waitSucceeded(t, cl, id, 50)

	// Another stream takes what room is left.
	ctx := context.Background()
	js := srv.JS()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	blob := make([]byte, 512<<10)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Publish(pctx, "filler.x", blob)
		cancel()
		if err != nil {
			require.ErrorContains(t, err, "insufficient resources")
			break
		}
	}
	// At most 100 of the 600 items are done (the others wait on filled).
	close(filled) // they now finish, and their results find no room

	// Refused at once, with the reason.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cl.JobSubmit(sctx, []byte(`{"id": "refused", "items": [{"id": "a"}], "agent_template": [{"handler": "slow"}]}`))
	cancel()
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeStoreFull, ae.Code, "%v", err)
	t.Logf("submission refused: %v", err)

	// Status says why nothing moves once the lease could not be renewed.
	fleettest.WaitFor(t, time.Minute, func() error {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := cl.JobStatus(sctx, id)
		if !errors.As(err, &ae) || ae.Code != messages.CodeStoreFull {
			return fmt.Errorf("status: %v", err)
		}
		t.Logf("status: %v", err)
		return nil
	})
	// Set by the health check (every second) from the lease's last write.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if g := gauge(t, reg, "jetfleet_coordinator_store_full"); g != 1 {
			return fmt.Errorf("store_full gauge %v", g)
		}
		return nil
	})

	// Room again.
	fleettest.WaitFor(t, time.Minute, func() error {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return js.DeleteStream(dctx, "FILLER")
	})
	st := waitJob(t, cl, id, 2*time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, n, st.Succeeded, "every item counted once: %+v", st)
	require.LessOrEqual(t, st.Budget.Consumed, st.Budget.Total)
	requireExactResults(t, srv, id, n)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if g := gauge(t, reg, "jetfleet_coordinator_store_full"); g != 0 {
			return fmt.Errorf("store_full gauge %v", g)
		}
		return nil
	})
	sctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = cl.JobStatus(sctx, "refused")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeNotFound, ae.Code, "the refused submission is no job: %v", err)
}
