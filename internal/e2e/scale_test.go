//go:build unix

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Issue #23's scale test: 10,000 open jobs across 20 pools with no agents
// on one server. The coordinator follows all of them with a bounded
// number of consumers (one results consumer, not one per job: the
// server's 1,000 per stream stopped the fleet before), and a small job of
// another pool still starts within a second and finishes with exact
// counts. With -v it logs how long the jobs took to open and the process's
// CPU at rest (coordinator and embedded server together;
// docs/benchmarks.md).
func TestTenThousandOpenJobs(t *testing.T) {
	t.Parallel()
	// Measured: opening 10,000 jobs takes about a minute here; several
	// times that under -race on 2 shared cores.
	skipScale(t, "10,000 open jobs")
	const jobs, pools = 10_000, 20
	srv := fleettest.RunServer(t)
	// Each pool's dead-letter stream reserves its quota (DLQMaxBytes) of the
	// server's store up front (docs/deploy.md, Storage): 21 pools at the
	// harness's 64 MiB would reserve more than the test server's 1 GiB.
	prov := calmProvision
	prov.DLQMaxBytes = 16 << 20
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: coordinator.DefaultStatusInterval})
	cl := client(t, srv)
	js := srv.JS()

	t0 := time.Now()
	for i := range jobs {
		spec := fmt.Sprintf(`{"id": "open-%05d", "pool": "p%02d", "items": [1], "agent_template": [{"handler": "noop"}]}`, i, i%pools)
		_, err := js.PublishAsync("fleet.jobs.submit", []byte(spec), jetstream.WithMsgID(fmt.Sprintf("open-%05d", i)))
		require.NoError(t, err)
		if i%1000 == 999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("submissions not stored")
			}
		}
	}
	fleettest.WaitFor(t, 5*time.Minute, func() error {
		page, err := cl.JobListPage(context.Background(), messages.ListRequest{State: messages.StateRunning, Limit: 1})
		if err != nil {
			return err
		}
		if page.Total < jobs {
			return fmt.Errorf("%d of %d jobs running", page.Total, jobs)
		}
		return nil
	})
	t.Logf("%d jobs across %d pools open in %v", jobs, pools, time.Since(t0).Round(time.Millisecond))

	// Bounded server resources: one results consumer (and no catch-up
	// left), one work consumer per pool.
	ctx := context.Background()
	consumers := func(stream string) int {
		s, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		return s.CachedInfo().State.Consumers
	}
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if n := consumers("FLEET_RESULTS"); n != 1 {
			return fmt.Errorf("%d results consumers", n)
		}
		return nil
	})
	require.Equal(t, pools, consumers("FLEET_WORK"), "one work consumer per pool")
	acct, err := js.AccountInfo(ctx)
	require.NoError(t, err)
	// Bounded by the pools, not the jobs: per pool its work consumer and
	// the work stream's source of its park stream; then the results
	// consumer, the intake, the DLQ mover, the KV and event watchers, and
	// at most 16 results catch-ups (fewer than 40 in all).
	require.Less(t, acct.Consumers, 2*pools+40, "consumers in the account, with %d open jobs", jobs)
	t.Logf("consumers: %d in the account, 1 on FLEET_RESULTS, %d on FLEET_WORK", acct.Consumers, pools)

	// CPU at rest: nothing runs, 10,000 jobs wait.
	const rest = 5 * time.Second
	c0, r0 := cpuTime(t), time.Now()
	time.Sleep(rest) // a measurement window, not a wait for an outcome
	cpu, wall := cpuTime(t)-c0, time.Since(r0)
	t.Logf("CPU at rest with %d open jobs: %.1f%% of one core (%v over %v; coordinator and embedded server in one process)",
		jobs, 100*float64(cpu)/float64(wall), cpu.Round(time.Millisecond), wall.Round(time.Millisecond))

	// A small job of another pool starts within a second.
	started := make(chan time.Time, 2)
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "other", Pool: "other"}, testhooks.Agent{Provision: calmProvision}), map[string]agent.HandlerFunc{
		"mark": func(context.Context, *agent.Call) (any, error) {
			started <- time.Now()
			return nil, nil
		},
	})
	ts := time.Now()
	id := submit(t, cl, `{"id": "small", "pool": "other", "items": [1, 2], "agent_template": [{"handler": "mark"}]}`)
	var first time.Time
	select {
	case first = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the small job's first item did not start")
	}
	t.Logf("the small job's first item started %v after its submission", first.Sub(ts).Round(time.Millisecond))
	require.Less(t, first.Sub(ts), time.Second, "the small job must start within a second beside %d open jobs", jobs)
	st := waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.Equal(t, int64(2), st.Succeeded)
	require.Equal(t, int64(2), st.Items)
}
