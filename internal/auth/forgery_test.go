package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// refusedCount reads jetfleet_coordinator_results_refused_total{reason}.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "jetfleet_coordinator_results_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// What an agent may publish, it may publish only for its own pool: a
// result or a dead letter an agent of one pool forges for an item routed
// to another is stored (the subject is its own) but never counted or
// replayed, a reopen marker from an agent is ignored, and a replay sends
// an item back to the pool its job routes it to, whatever the entry
// claims. With the generated permissions and real agents, the jobs then
// run to the end with exact counts.
func TestForgedOutcomesFromAnotherPoolAreIgnored(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := s.names

	cnc, cerrs := s.connect(t, "coordinator")
	reg := prometheus.NewRegistry()
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	for _, pool := range []string{"default", "gpu"} {
		_, err := provision.EnsurePool(ctx, cjs, names, pool, provision.Config{AckWait: 5 * time.Second})
		require.NoError(t, err)
	}

	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	submit := func(spec string) {
		t.Helper()
		_, err := sub.JobSubmit(ctx, []byte(spec))
		require.NoError(t, err)
	}
	waitPublished := func(job string, n int64) {
		t.Helper()
		natstest.WaitFor(t, 30*time.Second, func() error {
			st, err := sub.JobStatus(ctx, job)
			if err != nil {
				return err
			}
			if st.Published != n {
				return fmt.Errorf("%s: published %d of %d", job, st.Published, n)
			}
			return nil
		})
	}
	// "victim" runs on pool default; "routed" sends its gpu group to pool
	// gpu and its eu group (no such pool) to default. No agent runs yet.
	submit(`{"id": "victim", "items": [{"id": "i0"}, {"id": "i1"}, {"id": "i2"}], "agent_template": [{"handler": "noop"}]}`)
	submit(`{"id": "routed", "group_by": "${item.region}", "items": [{"id": "a", "region": "gpu"}, {"id": "b", "region": "eu"}, {"id": "c", "region": "gpu"}],
		"agent_template": [{"handler": "noop"}]}`)
	waitPublished("victim", 3)
	waitPublished("routed", 3)

	gnc, gerrs := s.connect(t, auth.AgentUser("gpu"))
	gjs, err := jetstream.New(gnc)
	require.NoError(t, err)
	dnc, derrs := s.connect(t, auth.AgentUser("default"))
	djs, err := jetstream.New(dnc)
	require.NoError(t, err)
	pub := func(js jetstream.JetStream, subject string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		_, err := js.Publish(ctx, subject, data)
		require.NoError(t, err, subject)
	}
	result := func(job, item string, idx int64, outcome string) messages.Result {
		return messages.Result{JobID: job, ItemID: item, Index: idx, Outcome: outcome, Agent: "forger", FinishedAt: time.Now()}
	}

	// An agent of pool gpu reports victim's items (routed to default) as
	// succeeded, and routed's item b (routed to default).
	for i := range int64(3) {
		pub(gjs, names.ResultSubject("gpu", "victim"), result("victim", fmt.Sprintf("i%d", i), i, messages.OutcomeSucceeded))
	}
	pub(gjs, names.ResultSubject("gpu", "routed"), result("routed", "b", 1, messages.OutcomeSucceeded))
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := refusedCount(t, reg, "wrong_pool"); n != 4 {
			return fmt.Errorf("%v results refused", n)
		}
		return nil
	})
	for _, job := range []string{"victim", "routed"} {
		st, err := sub.JobStatus(ctx, job)
		require.NoError(t, err)
		require.Equal(t, messages.StateRunning, st.State, job)
		require.Zero(t, st.Done(), "%s: a forged result was counted: %+v", job, st)
	}

	// Dead letters: pool gpu forges one for victim's item i0; an agent of
	// default writes one for i1 that claims pool gpu and gpu's subject.
	pub(gjs, wire.PoolDLQSubject(names, "gpu", "victim"), messages.DLQEntry{JobID: "victim", ItemID: "i0", Index: 0, Pool: "default",
		Payload: json.RawMessage(`{"id":"i0","evil":true}`), Subject: names.WorkSubject("default", "victim"), Reason: messages.ReasonAttempts})
	pub(djs, wire.PoolDLQSubject(names, "default", "victim"), messages.DLQEntry{JobID: "victim", ItemID: "i1", Index: 1, Pool: "gpu",
		Payload: json.RawMessage(`{"id":"i1"}`), Subject: names.WorkSubject("gpu", "victim"), Reason: messages.ReasonAttempts})

	// The real agents run both jobs to the end.
	for _, pool := range []string{"default", "gpu"} {
		nc := dnc
		if pool == "gpu" {
			nc = gnc
		}
		a := agent.New(nc, agent.Config{Pool: pool, Name: "real-" + pool, ShutdownTimeout: time.Second}).HandleBuiltins()
		go func() { done <- a.Run(runCtx) }()
	}
	for _, job := range []string{"victim", "routed"} {
		st, err := sub.JobWait(ctx, job, 20*time.Millisecond, nil)
		require.NoError(t, err)
		require.Equal(t, messages.StateSucceeded, st.State, "%s: %+v", job, st)
		require.EqualValues(t, 3, st.Succeeded, job)
	}
	st, err := sub.JobStatus(ctx, "routed")
	require.NoError(t, err)
	require.Equal(t, messages.GroupStatus{Items: 2, Done: 2, Succeeded: 2}, st.Groups["gpu"])
	require.Equal(t, messages.GroupStatus{Items: 1, Done: 1, Succeeded: 1}, st.Groups["eu"])

	// An agent's reopen marker would hold a finished job open forever.
	reopen := result("victim", "i2", 2, messages.OutcomeReopened)
	reopen.Generation = 1
	pub(djs, names.ResultSubject("default", "victim"), reopen)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := refusedCount(t, reg, "coordinator_only"); n != 1 {
			return fmt.Errorf("%v markers refused", n)
		}
		return nil
	})

	// The operator replays victim's dead letters: gpu's forgery is not
	// replayed; default's entry goes back to pool default (where victim
	// routes it), not to the gpu subject it names.
	onc, oerrs := s.connect(t, "operator")
	op, err := client.New(onc, "")
	require.NoError(t, err)
	rs, err := op.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "victim"}, Wait: true})
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCompleted, rs.State)
	require.EqualValues(t, 1, rs.Replayed, "%+v", rs)
	require.EqualValues(t, 1, rs.Failed, "%+v", rs)
	require.Contains(t, rs.LastError, `written by pool "gpu"`)
	page, err := op.DLQList(ctx, messages.DLQFilter{JobID: "victim"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1, "the forged entry stays for an operator to look at")
	require.Equal(t, "gpu", page.Entries[0].Origin)
	require.Equal(t, "gpu", page.Entries[0].Entry.Pool, "an agent's entry is its pool's, whatever the body claims")

	st, err = sub.JobWait(ctx, "victim", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 3, st.Succeeded)
	// The replayed item ran in pool default, as generation 1.
	rstream, err := cjs.Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	natstest.WaitFor(t, 30*time.Second, func() error {
		m, err := rstream.GetLastMsgForSubject(ctx, names.ResultSubject("default", "victim"))
		if err != nil {
			return err
		}
		rs, err := wire.DecodeResults(m.Data, nil)
		if err != nil {
			return err
		}
		if len(rs) != 1 {
			return fmt.Errorf("last default results message holds %d results", len(rs))
		}
		if r := rs[0]; r.ItemID != "i1" || r.Generation != 1 || r.Agent != "real-default" {
			return fmt.Errorf("last default result: %+v", r)
		}
		return nil
	})
	work, err := cjs.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	info, err := work.Info(ctx, jetstream.WithSubjectFilter(names.WorkSubject("gpu", "victim")))
	require.NoError(t, err)
	require.Zero(t, info.State.Subjects[names.WorkSubject("gpu", "victim")], "nothing of victim went to pool gpu")

	stop()
	for range 3 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	for role, ae := range map[string]*asyncErrs{"coordinator": cerrs, "agent-gpu": gerrs, "agent-default": derrs, "operator": oerrs} {
		require.Empty(t, ae.violations(), "%s was refused something it needs", role)
	}
}
