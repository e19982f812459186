package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// rollup publishes an empty message with Nats-Rollup: all on subject.
func rollup(ctx context.Context, js jetstream.JetStream, subject string) error {
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Rollup", "all")
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := js.PublishMsg(ctx, m)
	return err
}

// One message with Nats-Rollup: all would empty a whole stream. With the
// generated permissions, an agent's rollups are refused by every bucket it
// writes (item state, budgets, breakers, presence), and allowed only in
// its own pool's park stream, which holds nothing of another pool's; a
// submitter's are refused by the uploads bucket. Another pool's job whose
// items are parked meanwhile, and a job whose input another submitter
// uploaded, finish with exact counts.
func TestRollupsCannotWipeSharedState(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := s.names

	cnc, cerrs := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	for _, pool := range []string{"default", "gpu"} {
		_, err := provision.EnsurePool(ctx, cjs, names, pool, provision.Config{AckWait: 5 * time.Second})
		require.NoError(t, err)
	}

	// A submitter uploads an input; pool gpu's job fails each item once
	// and parks its retry for 2 s.
	snc, _ := s.connect(t, "submitter")
	sjs, err := jetstream.New(snc)
	require.NoError(t, err)
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	up, err := upload.PutBytes(ctx, sjs, names.UploadsBucket(), "k3/items.json", []byte(`[`+items(4)+`]`))
	require.NoError(t, err)

	gnc, gerrs := s.connect(t, auth.AgentUser("gpu"))
	ga := agent.New(gnc, agent.Config{Pool: "gpu", ParkAfter: time.Second, ShutdownTimeout: time.Second}).HandleBuiltins()
	go func() { done <- ga.Run(runCtx) }()
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "victim", "pool": "gpu", "input": "objstore://fleet_uploads/k3/items.json",
		"input_digest": "`+up.Digest+`", "retry_budget": 4,
		"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
			"retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "2s", "jitter": false}}]}`))
	require.NoError(t, err)
	gpuPark, err := cjs.Stream(ctx, names.ParkStream("gpu"))
	require.NoError(t, err)
	parked := func() uint64 {
		info, err := gpuPark.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := parked(); n != 4 {
			return fmt.Errorf("%d of 4 items parked", n)
		}
		return nil
	})

	// An agent of pool default rolls up everything it may publish to.
	dnc, _ := s.connect(t, auth.AgentUser("default"))
	djs, err := jetstream.New(dnc)
	require.NoError(t, err)
	for _, subject := range []string{
		"$KV." + names.ItemsBucket() + ".default.victim.x",
		"$KV." + names.BudgetBucket() + ".default.victim",
		"$KV." + names.BreakerBucket() + ".default.victim",
		"$KV." + names.AgentsBucket() + ".default.x",
	} {
		err := rollup(ctx, djs, subject)
		require.ErrorContains(t, err, "rollup not permitted", subject)
	}
	// Its own pool's park stream takes the rollup (schedules need
	// rollups); pool gpu's parked items are in a stream of their own.
	require.NoError(t, rollup(ctx, djs, wire.ParkSubject(names, "default", "victim", "x")))
	require.EqualValues(t, 4, parked(), "pool gpu's parked items survive")
	// A schedule aimed at pool gpu is refused: its target is not in the
	// stream of pool default.
	m := nats.NewMsg(wire.ParkSubject(names, "default", "victim", "y"))
	m.Header.Set(wire.HeaderSchedule, "@every 1s")
	m.Header.Set(wire.HeaderScheduleTarget, wire.ParkDueSubject(names, "gpu", "victim"))
	_, err = djs.PublishMsg(ctx, m)
	require.ErrorContains(t, err, "target is invalid", "a schedule into another pool")

	// A submitter rolls up the uploads bucket.
	require.ErrorContains(t, rollup(ctx, sjs, "$O."+names.UploadsBucket()+".M.eA"), "rollup not permitted")

	st, err := sub.JobWait(ctx, "victim", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 4, st.Succeeded, "%+v", st)
	require.EqualValues(t, 4, st.Retries, "%+v", st)
	require.EqualValues(t, 4, st.Budget.Consumed, "%+v", st.Budget)

	stop()
	for range 2 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	for role, ae := range map[string]*asyncErrs{"coordinator": cerrs, "agent-gpu": gerrs} {
		require.Empty(t, ae.violations(), "%s was refused something it needs", role)
	}
}
