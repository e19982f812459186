package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/jobrun"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The coordinator cleans up and deletes jobs, and the operator prunes
// them, with nothing but their roles' grants: item state, breaker keys, a
// reduce's map results in the inputs bucket, results, events and the
// submission all go, and no call is refused.
func TestRetentionRunsWithTheRolesPermissions(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default"}})
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("timed out"))
	defer cancel()

	cnc, cerrs := s.connect(t, "coordinator")
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	coord, err := jobrun.New(cnc, testhooks.WithCoordinator(jobrun.Config{LateResultWindow: 10 * time.Millisecond}, testhooks.Coordinator{Clock: clk}))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	coordDone := make(chan error, 1)
	go func() { coordDone <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	_, aerrs, agentDone := s.startAgent(t, ctx, runCtx, cjs)

	snc, serrs := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "kept", "items": [`+items(4)+`],
		"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
			"retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "10ms", "circuit_breaker": {"failure_threshold": 100, "timeout": "1h"}}}],
		"reduce": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	st, err := sub.JobWait(ctx, "kept", 50*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)

	onc, oerrs := s.connect(t, "operator")
	op, err := client.New(onc, "")
	require.NoError(t, err)
	clk.Advance(time.Hour)
	// Once the job's runner has left (its late-result window is real).
	natstest.WaitFor(t, 30*time.Second, func() error {
		rs, err := coord.RetentionPass(ctx)
		if err == nil && rs.Cleaned != 1 {
			err = fmt.Errorf("not cleaned yet: %+v", rs)
		}
		return err
	})
	hour := messages.Duration(time.Hour)
	reply, err := op.JobPrune(ctx, messages.PruneRequest{OlderThan: &hour})
	require.NoError(t, err)
	require.Equal(t, 1, reply.Pruned, "%+v", reply)
	require.Zero(t, reply.Failed)

	stop()
	require.NoError(t, <-agentDone)
	require.NoError(t, <-coordDone)
	for role, ae := range map[string]*asyncErrs{"coordinator": cerrs, "agent": aerrs, "submitter": serrs, "operator": oerrs} {
		require.Empty(t, ae.violations(), "%s was refused something it needs", role)
	}
}
