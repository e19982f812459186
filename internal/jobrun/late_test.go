package jobrun

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A finished job follows its results for LateResultWindow and no longer:
// a late result within the window is counted (TestBestEffortLateResults in
// internal/e2e), one after it stays in the results stream and changes
// nothing, even under late_results: update.
func TestLateResultWindowExpires(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	names := messages.MustNames("")
	ctx := context.Background()
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, testProv))
	for _, p := range []string{"a", "c"} {
		_, err := provision.EnsurePool(ctx, srv.JS(), names, p, testProv)
		require.NoError(t, err)
	}
	const window = time.Second
	c, p := startCoord(t, srv, Config{LateResultWindow: window})
	defer p.stop(t)

	cRuns, release := make(chan struct{}), make(chan struct{})
	start := func(pool string, h agent.HandlerFunc) *running {
		a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{Name: pool, Pool: pool, Concurrency: 1, Prefetch: 1,
			ShutdownTimeout: time.Second}, testhooks.Agent{Provision: testProv})).Handle("h", h)
		actx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- a.Run(actx) }()
		return r
	}
	// Group a finishes once c's item runs; c's item runs until released.
	ag := start("a", func(ctx context.Context, _ *agent.Call) (any, error) {
		select {
		case <-cRuns:
			return "a", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	defer ag.stop(t)
	cg := start("c", func(ctx context.Context, _ *agent.Call) (any, error) {
		close(cRuns)
		select {
		case <-release:
			return "late", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	defer cg.stop(t)

	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	reply, err := cl.Submit(ctx, []byte(`{"id": "window", "group_by": "${item.g}", "items": [{"id": "a0", "g": "a"}, {"id": "a1", "g": "a"}, {"id": "c0", "g": "c"}],
		"agent_template": [{"handler": "h"}], "best_effort": {"min_groups": 1, "late_results": "update"}}`))
	require.NoError(t, err)
	st := waitEnd(t, cl, reply.JobID)
	require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
	require.EqualValues(t, 1, st.NotRun, "c0 was running")
	finished := time.Now()

	// The runner stops following the job when its window has passed.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if c.runner(reply.JobID) != nil {
			return fmt.Errorf("still following")
		}
		return nil
	})
	// Not before the window (measured from when this test saw the end,
	// after the runner did: half of it leaves room for a slow machine).
	require.GreaterOrEqual(t, time.Since(finished), window/2, "not before the window")

	// c0 reports now: its result is stored but not counted.
	close(release)
	results, err := srv.JS().Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		_, err := results.GetLastMsgForSubject(ctx, names.ResultSubject("c", reply.JobID))
		return err
	})
	st, err = cl.Status(ctx, reply.JobID)
	require.NoError(t, err)
	require.Zero(t, st.LateResults)
	require.EqualValues(t, 1, st.NotRun, "not amended: the window had passed")
	require.EqualValues(t, 2, st.Succeeded)
}
