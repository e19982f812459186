package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Retry budgets and circuit breakers are kept per pool, and the server
// lets an agent write its own pool's keys only. An agent of pool default
// tries to write pool gpu's: a budget of 1000 for a job whose spec allows
// 2, a breaker open until 2099 for another, then, once the jobs run, to
// spend the first job's budget; every write is refused by the server. An
// agent of pool gpu itself writes the same values before the jobs are
// submitted: the limits stay the ones the coordinator set (2 retries: 2
// items succeed, 2 are dead-lettered), and the breaker keeps its job's
// items out for at most its timeout.
func TestSharedStateKeepsTheCoordinatorsLimits(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	_, err = provision.EnsurePool(ctx, cjs, names, "gpu", provision.Config{AckWait: 5 * time.Second})
	require.NoError(t, err)

	// refused requires the server to refuse a write of pool gpu's key by
	// pool default's agent: a denied JetStream publish gets no answer, and
	// the connection hears the violation naming the subject.
	dnc, derrs := s.connect(t, auth.AgentUser("default"))
	djs, err := jetstream.New(dnc)
	require.NoError(t, err)
	refused := func(bucket, key string, write func(context.Context, jetstream.KeyValue) error) {
		t.Helper()
		kv, err := djs.KeyValue(ctx, bucket)
		require.NoError(t, err)
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		require.Error(t, write(wctx, kv), "%s %s written by another pool's agent", bucket, key)
		select {
		case v := <-derrs.perm:
			require.Contains(t, v.Error(), "$KV."+bucket+"."+key)
		case <-time.After(5 * time.Second):
			t.Fatalf("no permissions violation for %s %s", bucket, key)
		}
	}
	forged := []byte(`{"total":1000,"per_item_max":1000,"consumed":0}`)
	open2099 := []byte(`{"state":"open","failures":0,"opened_at":"2099-01-01T00:00:00Z","probes":0,"successes":0}`)
	refused(names.BudgetBucket(), "gpu.budgeted", func(ctx context.Context, kv jetstream.KeyValue) error {
		_, err := kv.Create(ctx, budget.Key("gpu", "budgeted"), forged)
		return err
	})
	refused(names.BreakerBucket(), "gpu.broken", func(ctx context.Context, kv jetstream.KeyValue) error {
		_, err := kv.Put(ctx, "gpu.broken", open2099)
		return err
	})

	// Pool gpu's own agent key, before the jobs are submitted.
	fnc, _ := s.connect(t, auth.AgentUser("gpu"))
	fjs, err := jetstream.New(fnc)
	require.NoError(t, err)
	bkv, err := fjs.KeyValue(ctx, names.BudgetBucket())
	require.NoError(t, err)
	forger, err := budget.New(bkv)
	require.NoError(t, err)
	_, created, err := forger.Create(ctx, budget.Key("gpu", "budgeted"), budget.Record{Total: 1000, PerItemMax: 1000})
	require.NoError(t, err)
	require.True(t, created)
	forger.Close()
	brk, err := fjs.KeyValue(ctx, names.BreakerBucket())
	require.NoError(t, err)
	_, err = brk.Create(ctx, "gpu.broken", open2099)
	require.NoError(t, err)

	gnc, gerrs := s.connect(t, auth.AgentUser("gpu"))
	ga := agent.New(gnc, agent.Config{Pool: "gpu", ShutdownTimeout: time.Second}).HandleBuiltins()
	go func() { done <- ga.Run(runCtx) }()
	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	for _, spec := range []string{
		`{"id": "budgeted", "pool": "gpu", "items": [` + items(4) + `], "retry_budget": 2,
			"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
				"retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms", "jitter": false}}]}`,
		`{"id": "broken", "pool": "gpu", "items": [` + items(3) + `],
			"error_policy": {"circuit_breaker": {"failure_threshold": 5, "success_threshold": 1, "timeout": "1s", "half_open_requests": 1}},
			"agent_template": [{"handler": "noop"}]}`,
	} {
		_, err := sub.JobSubmit(ctx, []byte(spec))
		require.NoError(t, err)
	}

	// Pool default's agent tries to spend the running job's budget.
	refused(names.BudgetBucket(), "gpu.budgeted", func(ctx context.Context, kv jetstream.KeyValue) error {
		_, err := kv.Put(ctx, budget.Key("gpu", "budgeted"), []byte(`{"total":2,"per_item_max":2,"consumed":2}`))
		return err
	})

	st, err := sub.JobWait(ctx, "budgeted", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Succeeded, "%+v", st)
	require.EqualValues(t, 2, st.DeadLettered, "%+v", st)
	require.EqualValues(t, 2, st.Retries, "%+v", st)
	require.Equal(t, 2, st.Budget.Total, "%+v", st.Budget)

	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	st, err = sub.JobWait(wctx, "broken", 20*time.Millisecond, nil)
	wcancel()
	require.NoError(t, err, "the breaker opened until 2099 kept the job's items out")
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 3, st.Succeeded, "%+v", st)

	stop()
	for range 2 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	require.Empty(t, cerrs.violations())
	require.Empty(t, gerrs.violations())
}
