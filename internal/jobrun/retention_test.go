package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// countSubject counts the messages of stream stored under subject (a
// filter), delete and purge markers included.
func countSubject(t testing.TB, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// flaky fails each item's first attempt (so the agent writes its item
// state) and the items in dead permanently.
type flaky struct {
	mu   sync.Mutex
	seen map[string]bool
	dead map[string]bool
}

func (f *flaky) handler(_ context.Context, c *agent.Call) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead[c.ItemID] {
		return nil, retry.Permanent(errors.New("disk full"))
	}
	if !f.seen[c.ItemID] {
		f.seen[c.ItemID] = true
		return nil, errors.New("connection refused")
	}
	return "ok", nil
}

// retentionFixture runs a coordinator on a manual clock (the retention
// decisions read it; the runners' late-result window is real and short)
// and one agent.
type retentionFixture struct {
	srv   *fleettest.Server
	c     *Coordinator
	cl    *Client
	clock *clock.Manual
	names messages.Names
}

func newRetentionFixture(t *testing.T, f *flaky) *retentionFixture {
	t.Helper()
	srv := fleettest.RunServer(t)
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, p := startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}, LateResultWindow: 50 * time.Millisecond,
		CleanupInterval: time.Hour, JobRetention: 24 * time.Hour, PruneMarkerTTL: time.Second})
	t.Cleanup(func() { p.stop(t) })
	a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{Name: "a1"}, testhooks.Agent{Provision: testProv})).Handle("h", f.handler)
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	t.Cleanup(func() { acancel(); require.NoError(t, <-adone) })
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	return &retentionFixture{srv: srv, c: c, cl: cl, clock: clk, names: messages.MustNames("")}
}

const retentionSpec = `{"id": %q, "items": [{"id": "i0"}, {"id": "i1"}, {"id": "i2"}],
	"agent_template": [{"handler": "h", "retry_config": {"attempts": 3, "initial_delay": "10ms", "jitter": false}}]}`

func (x *retentionFixture) run(t *testing.T, id string) *messages.JobStatus {
	t.Helper()
	_, err := x.cl.Submit(context.Background(), []byte(fmt.Sprintf(retentionSpec, id)))
	require.NoError(t, err)
	st := waitEnd(t, x.cl, id)
	waitNoRunner(t, x.c, id)
	return st
}

// left counts what job still has in each place retention cleans.
func (x *retentionFixture) left(t *testing.T, job string) map[string]uint64 {
	n, js := x.names, x.srv.JS()
	return map[string]uint64{
		"items":   countSubject(t, js, "KV_"+n.ItemsBucket(), "$KV."+n.ItemsBucket()+".*."+job+".>"),
		"budget":  countSubject(t, js, "KV_"+n.BudgetBucket(), "$KV."+n.BudgetBucket()+".*."+job),
		"breaker": countSubject(t, js, "KV_"+n.BreakerBucket(), "$KV."+n.BreakerBucket()+".*."+job+".>") + countSubject(t, js, "KV_"+n.BreakerBucket(), "$KV."+n.BreakerBucket()+".*."+job),
		"results": countSubject(t, js, n.ResultsStream(), n.JobResultsFilter(job)),
		"work":    countSubject(t, js, n.WorkStream(), n.WorkSubject("*", job)),
	}
}

// A settled job loses its item state (delete markers included), budget,
// breaker keys and results once its late-result window has passed; its
// record says when, keeps its counts, and a second pass changes nothing.
// A job with a dead letter waits until its last one leaves the DLQ.
func TestRetentionCleansUpSettledJobs(t *testing.T) {
	t.Parallel()
	f := &flaky{seen: map[string]bool{}, dead: map[string]bool{"i1": true}}
	x := newRetentionFixture(t, f)
	ctx := context.Background()

	st := x.run(t, "clean")
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 2, st.Succeeded)
	require.EqualValues(t, 1, st.DeadLettered)
	// Breaker keys as agents leave them (the job's and a step's).
	bkv := mustKV(t, x.srv, x.names.BreakerBucket())
	for _, k := range []string{"default.clean", "default.clean.0"} {
		_, err := bkv.Put(ctx, k, []byte(`{}`))
		require.NoError(t, err)
	}
	// An item state key deleted by its agent leaves a marker: purged too.
	ikv := mustKV(t, x.srv, x.names.ItemsBucket())
	_, err := ikv.Put(ctx, "default.clean.gone", []byte(`{}`))
	require.NoError(t, err)
	require.NoError(t, ikv.Delete(ctx, "default.clean.gone"))
	before := x.left(t, "clean")
	require.NotZero(t, before["items"], "%v", before)
	require.NotZero(t, before["budget"], "%v", before)
	require.EqualValues(t, 2, before["breaker"], "%v", before)
	require.NotZero(t, before["results"], "%v", before)

	// Within the late-result window (by the coordinator's clock): untouched.
	rs, err := x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Zero(t, rs.Cleaned)
	x.clock.Advance(time.Minute)

	// Settled, but a dead letter is left: a replay may still reopen it.
	rs, err = x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Zero(t, rs.Cleaned)
	require.Equal(t, before, x.left(t, "clean"))

	// The dead letter leaves the DLQ: cleaned at the next pass.
	n, err := x.cl.DLQPurge(ctx, messages.DLQPurgeRequest{DLQFilter: messages.DLQFilter{JobID: "clean"}, Confirm: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	rs, err = x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rs.Cleaned)
	for what, n := range x.left(t, "clean") {
		require.Zero(t, n, "%s left", what)
	}
	got, err := x.cl.Status(ctx, "clean")
	require.NoError(t, err)
	require.NotNil(t, got.CleanupAt)
	require.NotNil(t, got.CleanedAt)
	require.Equal(t, st.Succeeded, got.Succeeded, "the counts stay")
	require.Equal(t, st.DeadLettered, got.DeadLettered)

	// Idempotent: nothing more to do.
	rs, err = x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Zero(t, rs.Cleaned+rs.Pruned+rs.Failed)
}

// A cleanup interrupted after it began (a crash) is finished by the next
// pass; meanwhile the job is already refused to replays.
func TestRetentionResumesAnInterruptedCleanup(t *testing.T) {
	t.Parallel()
	f := &flaky{seen: map[string]bool{}}
	x := newRetentionFixture(t, f)
	ctx := context.Background()
	x.run(t, "crash")
	x.clock.Advance(time.Minute)

	// What a coordinator that died right after marking the start leaves.
	rec, rev, err := x.c.store.getRev(ctx, "crash")
	require.NoError(t, err)
	now := x.clock.Now()
	rec.Status.CleanupAt = &now
	_, ok, err := x.c.store.update(ctx, rec, rev)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotZero(t, x.left(t, "crash")["results"])

	// A dead letter written late (a straggler) is not replayed into a job
	// whose results are being removed.
	data, _ := json.Marshal(messages.DLQEntry{JobID: "crash", ItemID: "i0", Index: 0, Subject: x.names.WorkSubject("default", "crash"), Reason: messages.ReasonAttempts})
	_, err = x.srv.JS().Publish(ctx, x.names.DLQSubject("default", "crash"), data)
	require.NoError(t, err)
	rs, err := x.cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "crash"}, Wait: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, rs.Failed, "%+v", rs)
	require.Zero(t, rs.Replayed)
	require.Contains(t, rs.LastError, "results were removed")

	// The next pass finishes the cleanup, dead letter or not: it began.
	rp, err := x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rp.Cleaned)
	for what, n := range x.left(t, "crash") {
		require.Zero(t, n, "%s left", what)
	}
	st, err := x.cl.Status(ctx, "crash")
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State, "not reopened")
	require.NotNil(t, st.CleanedAt)
}

// Records expire JobRetention after their job finished (the pass), or
// on demand (jobs.prune, with a dry run first); a pruned job leaves the
// index, so jobs.list and jobs.status no longer know it, and its events
// and submission go with it.
func TestPruneExpiredJobs(t *testing.T) {
	t.Parallel()
	f := &flaky{seen: map[string]bool{}}
	x := newRetentionFixture(t, f)
	ctx := context.Background()
	x.run(t, "old")
	// A rejected submission (nothing to clean) expires too.
	_, err := x.srv.JS().Publish(ctx, x.names.JobsSubmitSubject(), []byte(`{"id": "bad", "items": []}`))
	require.NoError(t, err)
	waitState(t, x.cl, "bad", messages.StateRejected)
	x.clock.Advance(12 * time.Hour)
	x.run(t, "young")
	// old (12h ago) is cleaned; then an item that outlived the window reported.
	rs, err := x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rs.Cleaned)
	_, err = x.srv.JS().Publish(ctx, x.names.ResultSubject("default", "old"), []byte(`{"job_id": "old", "item_id": "i0", "outcome": "succeeded"}`))
	require.NoError(t, err)
	require.EqualValues(t, 1, x.left(t, "old")["results"])
	x.clock.Advance(13 * time.Hour) // old finished 25h ago, young 13h ago
	require.NotZero(t, countSubject(t, x.srv.JS(), x.names.EventsStream(), x.names.EventSubject("old", ">")))
	specs := func() uint64 {
		return countSubject(t, x.srv.JS(), "KV_"+x.names.SpecsBucket(messages.DefaultPool), "$KV."+x.names.SpecsBucket(messages.DefaultPool)+".old")
	}
	require.EqualValues(t, 1, specs(), "the spec record is kept while the job is")

	// The pass prunes what is older than JobRetention (24h), cleaning it
	// (again) first.
	rs, err = x.c.RetentionPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rs.Pruned, "%+v", rs)
	require.ElementsMatch(t, []string{"old", "bad"}, rs.Jobs)
	_, err = x.cl.Status(ctx, "bad")
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeNotFound, ae.Code)
	_, err = x.cl.Status(ctx, "old")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeNotFound, ae.Code)
	page, err := x.cl.ListPage(ctx, messages.ListRequest{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, "young", page.Jobs[0].ID)
	for what, n := range x.left(t, "old") {
		require.Zero(t, n, "%s left", what)
	}
	require.Zero(t, countSubject(t, x.srv.JS(), x.names.EventsStream(), x.names.EventSubject("old", ">")))
	require.Zero(t, specs(), "the spec record goes with the job")
	require.EqualValues(t, 1, countSubject(t, x.srv.JS(), x.names.JobsStream(), x.names.JobsSubmitSubject()), "young's submission only")

	// jobs.prune --older-than 12h --dry-run lists young and deletes nothing.
	twelve := messages.Duration(12 * time.Hour)
	reply, err := x.cl.Prune(ctx, messages.PruneRequest{OlderThan: &twelve, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, reply.Pruned)
	require.Equal(t, []string{"young"}, reply.Jobs)
	_, err = x.cl.Status(ctx, "young")
	require.NoError(t, err)
	reply, err = x.cl.Prune(ctx, messages.PruneRequest{OlderThan: &twelve})
	require.NoError(t, err)
	require.Equal(t, 1, reply.Pruned)
	page, err = x.cl.ListPage(ctx, messages.ListRequest{})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
	require.Zero(t, page.Total)

	// An age below the duplicate windows is refused with the field named:
	// a new job reusing the id would have its messages dropped as duplicates.
	err = x.cl.Call(ctx, messages.EndpointJobsPrune, []byte(`{"older_than": "5m"}`), nil)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "older_than", ae.Field)
	require.Contains(t, ae.Message, "10m")
}
