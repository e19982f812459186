package jobrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// soakJobs is how many jobs the soak test runs, scaled down for CI (the
// retention it checks does not depend on the number): two thousand, a
// quarter of that under the race detector, which slows each job's
// acceptance and run several times.
func soakJobs() int {
	if raceEnabled {
		return 500
	}
	return 2000
}

// soakWave is how many jobs are submitted at once.
const soakWave = 250

// streamSizes reads the message and byte counts of every stream a job
// writes to: the fleet's streams and the streams behind its job buckets
// and object store (not the agents' presence, which is no job's).
func streamSizes(t testing.TB, js jetstream.JetStream, n messages.Names) map[string][2]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string][2]uint64{}
	for name := range js.StreamNames(ctx).Name() {
		if name == "KV_"+n.AgentsBucket() {
			continue
		}
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		out[name] = [2]uint64{info.State.Msgs, info.State.Bytes}
	}
	return out
}

// A soak of thousands of small jobs — some retried (item state), some
// with a reduce phase (objects in the inputs bucket), all with budget
// keys, results and events — returns every bucket and stream to its size
// before the jobs once they have settled and expired, and jobs.list pages
// through them meanwhile. The late-result window is real (and short); the
// retention decisions read the coordinator's manual clock.
func TestSoakRetentionReturnsToBaseline(t *testing.T) {
	if testing.Short() || os.Getenv("JETFLEET_SCALE") != "1" {
		t.Skip("a soak: run with JETFLEET_SCALE=1 (.ci/run does), without -short")
	}
	srv := fleettest.RunServer(t)
	names := messages.MustNames("")
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, p := startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}, LateResultWindow: 20 * time.Millisecond,
		CleanupInterval: time.Hour, PruneMarkerTTL: time.Second, JobRetention: MinJobRetention})
	defer p.stop(t)
	handler := func(_ context.Context, call *agent.Call) (any, error) {
		if strings.HasPrefix(call.ItemID, "flaky") && call.Attempt == 1 {
			return nil, errors.New("connection refused")
		}
		return "ok", nil
	}
	var agents []*running
	for i := range 2 {
		a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 32}, testhooks.Agent{Provision: testProv})).Handle("h", handler)
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- a.Run(ctx) }()
		agents = append(agents, r)
	}
	defer func() {
		for _, a := range agents {
			a.stop(t)
		}
	}()
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	baseline := streamSizes(t, srv.JS(), names)
	start := time.Now()

	// Submit through the durable intake, as `nats pub` would, in waves
	// (a fleet's jobs come over time; thousands at once would test the
	// coordinator's concurrency, not retention).
	for w := 0; w < soakJobs()/soakWave; w++ {
		for i := w * soakWave; i < (w+1)*soakWave; i++ {
			spec := fmt.Sprintf(`{"id": "soak-%05d", "items": [{"id": "ok"}, {"id": "%s"}],
			"agent_template": [{"handler": "h", "retry_config": {"attempts": 2, "initial_delay": "10ms", "jitter": false}}]%s}`,
				i, map[bool]string{true: "flaky", false: "ok2"}[i%10 == 0], map[bool]string{true: `, "reduce": [{"handler": "h"}]`, false: ""}[i%50 == 0])
			_, err := srv.JS().PublishAsync(names.JobsSubmitSubject(), []byte(spec))
			require.NoError(t, err)
		}
		select {
		case <-srv.JS().PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			t.Fatal("submissions not stored")
		}
		want := (w + 1) * soakWave
		fleettest.WaitFor(t, 60*time.Second, func() error {
			page, err := cl.ListPage(ctx, messages.ListRequest{State: messages.StateSucceeded, Limit: 1})
			if err != nil {
				return err
			}
			if page.Total < want {
				return fmt.Errorf("%d of %d jobs succeeded (%v)", page.Total, want, page.States)
			}
			return nil
		})
	}
	t.Logf("%d jobs ran in %s", soakJobs(), time.Since(start))
	// jobs.list pages through every job, newest first, exactly once.
	seen := map[string]bool{}
	req := messages.ListRequest{Limit: MaxListLimit}
	for {
		page, err := cl.ListPage(ctx, req)
		require.NoError(t, err)
		for _, j := range page.Jobs {
			require.False(t, seen[j.ID], "%s listed twice", j.ID)
			seen[j.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	require.Len(t, seen, soakJobs())
	waitNoRunners(t, c)

	// Settled: cleaned at the next pass; only records, events and
	// submissions remain.
	clk.Advance(time.Minute)
	passStart := time.Now()
	rs, err := c.RetentionPass(ctx)
	t.Logf("cleanup pass: %d jobs in %s", rs.Cleaned, time.Since(passStart))
	require.NoError(t, err)
	require.Equal(t, soakJobs(), rs.Cleaned, "%+v", rs)
	sizes := streamSizes(t, srv.JS(), names)
	for _, s := range []string{"KV_" + names.ItemsBucket(), "KV_" + names.BudgetBucket(), "KV_" + names.BreakerBucket(),
		names.ResultsStream(), names.WorkStream(), "OBJ_" + names.InputsBucket()} {
		require.Equal(t, baseline[s], sizes[s], "%s after cleanup", s)
	}

	// Expired: the records go too, and their markers expire.
	clk.Advance(MinJobRetention)
	passStart = time.Now()
	rs, err = c.RetentionPass(ctx)
	t.Logf("prune pass: %d jobs in %s", rs.Pruned, time.Since(passStart))
	require.NoError(t, err)
	require.Equal(t, soakJobs(), rs.Pruned, "%+v", rs)
	page, err := cl.ListPage(ctx, messages.ListRequest{})
	require.NoError(t, err)
	require.Zero(t, page.Total)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		sizes := streamSizes(t, srv.JS(), names)
		for s, want := range baseline {
			got := sizes[s]
			if s == "KV_"+names.ControlBucket() {
				// The leader's lease: one key rewritten every second with
				// compare-and-set, whose stored size grows with the digits of
				// the revision each renewal names.
				got[1], want[1] = 0, 0
			}
			if got != want {
				return fmt.Errorf("%s holds %d messages, %d bytes; %d, %d before the jobs", s, got[0], got[1], want[0], want[1])
			}
		}
		return nil
	})
}

// waitNoRunners waits until c follows no job.
func waitNoRunners(t *testing.T, c *Coordinator) {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		c.mu.Lock()
		n := len(c.runners)
		c.mu.Unlock()
		if n > 0 {
			return fmt.Errorf("%d jobs still followed", n)
		}
		return nil
	})
}
