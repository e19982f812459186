package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Two teams share a fleet secured by fleetctl auth init --teams
// red=poola,blue=poolb. Team red's job fails with a secret on its step's
// stderr and is dead-lettered; team blue's succeeds. With the real keys:
//   - each team reads its own job's status, errors and dead letters, and
//     the other team's job is "not found" to it whatever it asks (status,
//     list, cancel, pause, dead letters by job or by sequence);
//   - a team submits to its own pools only;
//   - the server refuses a team's key the other team's subjects, the
//     shared API and durable intake, and every event;
//   - an agent reads its own pool's specs, which hold no outcome, and the
//     server refuses it the job records (where the errors are) and the
//     other pool's specs.
func TestTeamsSeeOnlyTheirOwnJobs(t *testing.T) {
	t.Parallel()
	teams := map[string][]string{"red": {"poola"}, "blue": {"poolb"}}
	s := runSecured(t, auth.Options{Pools: []string{"poola", "poolb"}, Teams: teams})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := s.names

	cnc, cerrs := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond, Teams: teams,
		Pools: []string{"poola", "poolb"}, MaxPools: -1})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	for _, p := range []string{"poola", "poolb"} {
		_, err = provision.EnsurePool(ctx, cjs, names, p, provision.Config{AckWait: 5 * time.Second})
		require.NoError(t, err)
	}
	var agentErrs []*asyncErrs
	for _, p := range []string{"poola", "poolb"} {
		anc, aerrs := s.connect(t, auth.AgentUser(p))
		agentErrs = append(agentErrs, aerrs)
		a := agent.New(anc, agent.Config{Pool: p, Concurrency: 2, ShutdownTimeout: time.Second}).HandleBuiltins()
		go func() { done <- a.Run(runCtx) }()
	}

	teamClient := func(team string) (*client.Client, *nats.Conn, *asyncErrs) {
		nc, ae := s.connect(t, auth.TeamUser(team))
		cl, err := client.New(nc, "", client.WithTeam(team))
		require.NoError(t, err)
		return cl, nc, ae
	}
	red, rnc, rerrs := teamClient("red")
	blue, _, berrs := teamClient("blue")

	_, err = red.JobSubmit(ctx, []byte(`{"id": "r1", "pool": "poola", "items": [{"id": "i0"}],
		"agent_template": [{"shell": "printf 'TOPSECRET-%s' RED-DBPASS >&2; exit 3", "retry_config": {"attempts": 1}}]}`))
	require.NoError(t, err)
	_, err = blue.JobSubmit(ctx, []byte(`{"id": "b1", "pool": "poolb", "items": [`+items(2)+`], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	var last *messages.JobStatus
	rst, err := red.JobWait(wctx, "r1", 100*time.Millisecond, func(st *messages.JobStatus) { last = st })
	wcancel()
	require.NoError(t, err, "last status %+v; agents' errors %v %v; coordinator's %v", last, agentErrs[0].violations(), agentErrs[1].violations(), cerrs.violations())
	require.Equal(t, messages.StateFailed, rst.State, "%+v", rst)
	require.EqualValues(t, 1, rst.DeadLettered)
	require.Equal(t, "red", rst.Team)
	ownErrors, err := json.Marshal(rst.Errors)
	require.NoError(t, err)
	require.Contains(t, string(ownErrors), "TOPSECRET-RED-DBPASS", "a team reads its own job's errors")
	bst, err := blue.JobWait(ctx, "b1", 0, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, bst.State)

	notFound := func(what string, err error) {
		t.Helper()
		var ae *messages.APIError
		require.True(t, errors.As(err, &ae), "%s: %v", what, err)
		require.Equal(t, messages.CodeNotFound, ae.Code, "%s: %v", what, err)
	}
	// The other team's job, by every endpoint a team has.
	_, err = blue.JobStatus(ctx, "r1")
	notFound("blue reads red's status", err)
	_, err = red.JobStatus(ctx, "b1")
	notFound("red reads blue's status", err)
	_, err = blue.JobCancel(ctx, "r1")
	notFound("blue cancels red's job", err)
	_, err = blue.JobPause(ctx, "r1")
	notFound("blue pauses red's job", err)
	_, err = blue.JobResume(ctx, "r1")
	notFound("blue resumes red's job", err)
	_, err = blue.DLQList(ctx, messages.DLQFilter{JobID: "r1"})
	notFound("blue lists red's dead letters", err)
	_, err = blue.DLQStats(ctx, messages.DLQFilter{JobID: "r1"})
	notFound("blue counts red's dead letters", err)
	_, err = blue.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "r1"}})
	notFound("blue replays red's dead letters", err)
	var ae *messages.APIError
	_, err = blue.DLQList(ctx, messages.DLQFilter{})
	require.True(t, errors.As(err, &ae) && ae.Code == messages.CodeBadRequest && ae.Field == "job_id", "every dead letter: %v", err)

	// Its own dead letters, and not by sequence from the other team.
	page, err := red.DLQList(ctx, messages.DLQFilter{JobID: "r1"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	_, err = blue.DLQGet(ctx, page.Entries[0].Seq)
	notFound("blue reads red's dead letter by sequence", err)
	ref, err := red.DLQGet(ctx, page.Entries[0].Seq)
	require.NoError(t, err)
	require.Equal(t, "r1", ref.Entry.JobID)

	// Lists show the team's own jobs.
	for cl, want := range map[*client.Client]string{red: "r1", blue: "b1"} {
		jobs, err := cl.JobList(ctx, messages.ListRequest{})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, want, jobs[0].ID)
	}

	// A team's pools only, and a job id of another team is not shown.
	_, err = red.JobSubmit(ctx, []byte(`{"id": "r2", "pool": "poolb", "items": [{"id": "i0"}], "agent_template": [{"handler": "noop"}]}`))
	require.True(t, errors.As(err, &ae) && ae.Code == messages.CodeInvalid && ae.Field == "pool", "red submits to poolb: %v", err)
	_, err = red.JobSubmit(ctx, []byte(`{"id": "b1", "pool": "poola", "items": [{"id": "i0"}], "agent_template": [{"handler": "noop"}]}`))
	require.True(t, errors.As(err, &ae) && ae.Code == messages.CodeConflict, "red resubmits blue's id: %v", err)
	_, err = red.JobSubmit(ctx, []byte(`{"id": "r3", "team": "blue", "pool": "poola", "items": [{"id": "i0"}], "agent_template": [{"handler": "noop"}]}`))
	require.True(t, errors.As(err, &ae) && ae.Field == "team", "red names blue as the team: %v", err)
	// A submission the intake rejects (its upload is missing) is the team's
	// to read, with its problems, and no other team's.
	_, err = red.JobSubmit(ctx, []byte(`{"id": "r4", "pool": "poola", "input": "objstore://fleet_uploads/none/items.json", "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	rej, err := red.JobWait(ctx, "r4", 0, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateRejected, rej.State)
	require.NotEmpty(t, rej.Problems)
	_, err = blue.JobStatus(ctx, "r4")
	notFound("blue reads red's rejected job", err)
	require.Empty(t, berrs.violations(), "a team needs nothing it is refused")

	// What the server refuses a team's key.
	refusedPub := func(subject string) {
		t.Helper()
		refusedRequest(t, rnc, rerrs.perm, subject, []byte(`{"job_id": "b1"}`))
	}
	refusedPub(names.TeamAPISubject("blue", messages.EndpointJobsStatus))
	refusedPub(names.APISubject(messages.EndpointJobsStatus))
	refusedPub(names.APISubject(messages.EndpointJobsSubmit))
	refusedPub(names.JobsSubmitSubject())
	refusedPub("$JS.API.DIRECT.GET.KV_" + names.JobsBucket() + ".$KV." + names.JobsBucket() + ".b1")
	sub, err := rnc.SubscribeSync(names.EventSubject("b1", messages.EventCompleted))
	require.NoError(t, err)
	select {
	case v := <-rerrs.perm:
		require.Contains(t, v.Error(), names.EventSubject("b1", messages.EventCompleted))
	case <-time.After(5 * time.Second):
		t.Fatal("a team's key subscribed to another team's events")
	}
	_ = sub.Unsubscribe()

	// Pool poola's agent: its own specs, no outcome in them; not the job
	// records, nor poolb's specs.
	anc, aerrs := s.connect(t, auth.AgentUser("poola"))
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	skv, err := ajs.KeyValue(ctx, names.SpecsBucket("poola"))
	require.NoError(t, err)
	e, err := skv.Get(ctx, "r1")
	require.NoError(t, err)
	var spec wire.SpecRecord
	require.NoError(t, json.Unmarshal(e.Value(), &spec))
	require.Equal(t, "r1", spec.Spec.ID)
	require.NotContains(t, string(e.Value()), "TOPSECRET-RED-DBPASS", "the spec record holds no outcome")
	for _, subject := range []string{
		"$JS.API.STREAM.INFO.KV_" + names.JobsBucket(),
		"$JS.API.DIRECT.GET.KV_" + names.JobsBucket() + ".$KV." + names.JobsBucket() + ".r1",
		"$JS.API.STREAM.MSG.GET.KV_" + names.JobsBucket(),
		"$JS.API.STREAM.INFO.KV_" + names.SpecsBucket("poolb"),
		"$JS.API.DIRECT.GET.KV_" + names.SpecsBucket("poolb") + ".$KV." + names.SpecsBucket("poolb") + ".b1",
		"$JS.API.STREAM.MSG.GET.KV_" + names.SpecsBucket("poolb"),
	} {
		body := []byte(`{"last_by_subj": "$KV.` + names.JobsBucket() + `.r1"}`)
		if strings.Contains(subject, "poolb") {
			body = []byte(`{"last_by_subj": "$KV.` + names.SpecsBucket("poolb") + `.b1"}`)
		}
		refusedRequest(t, anc, aerrs.perm, subject, body)
	}

	stop()
	for range 3 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	require.Empty(t, cerrs.violations())
	for _, ae := range agentErrs {
		require.Empty(t, ae.violations(), "an agent needs nothing it is refused")
	}
}

// refusedRequest sends a request the server must refuse, and returns once
// the connection reports the permissions violation: the server drops a
// refused request, so no answer can follow it, and waiting out the
// request's timeout (2 s each, 11 of them here) would show nothing more.
// An answer before the violation, or no violation within 5 s, fails.
func refusedRequest(t *testing.T, nc *nats.Conn, perm <-chan error, subject string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := nc.RequestWithContext(ctx, subject, body)
		answered <- err
	}()
	select {
	case v := <-perm:
		require.Contains(t, v.Error(), subject)
	case err := <-answered:
		t.Fatalf("%s: answered (error: %v) before any permissions violation", subject, err)
	case <-ctx.Done():
		t.Fatalf("%s: no permissions violation", subject)
	}
	cancel()
	require.ErrorIs(t, <-answered, context.Canceled, "%s: no answer", subject)
}

// refusedWrite runs write, a publish the server must refuse, and returns
// once the connection reports the permissions violation, which must name
// want: the server drops a refused publish, so no answer follows it, and
// waiting out the write's timeout would show nothing more. A write that
// succeeds, or no violation within 5 s, fails.
func refusedWrite(t *testing.T, perm <-chan error, what, want string, write func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	written := make(chan error, 1)
	go func() { written <- write(ctx) }()
	select {
	case v := <-perm:
		require.Contains(t, v.Error(), want, what)
		cancel()
		require.Error(t, <-written, "%s: written", what)
	case err := <-written:
		require.Error(t, err, "%s: written", what)
		select {
		case v := <-perm:
			require.Contains(t, v.Error(), want, what)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no permissions violation", what)
		}
	case <-ctx.Done():
		t.Fatalf("%s: no permissions violation", what)
	}
}
