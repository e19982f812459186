package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// markers is a directory of "broken-<item>" files a job's shell step
// checks: an item fails while its file exists, so a test "fixes" the
// command by removing the files.
type markers string

func newMarkers(t *testing.T) markers { return markers(t.TempDir()) }

func (m markers) breakItem(t *testing.T, id string) {
	require.NoError(t, os.WriteFile(filepath.Join(string(m), "broken-"+id), nil, 0o600))
}

func (m markers) fixAll(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(string(m), "broken-*"))
	require.NoError(t, err)
	for _, f := range files {
		require.NoError(t, os.Remove(f))
	}
}

// dlqEntries returns every DLQ entry of job.
func dlqEntries(t *testing.T, cl *jfclient.Client, job string) []messages.DLQEntryRef {
	t.Helper()
	var out []messages.DLQEntryRef
	f := messages.DLQFilter{JobID: job, Limit: 1000}
	for {
		page, err := cl.DLQList(context.Background(), f)
		require.NoError(t, err)
		out = append(out, page.Entries...)
		if !page.More {
			return out
		}
		f.AfterSeq = page.NextSeq
	}
}

// jobResults reads every result (and reopen marker) of job.
func jobResults(t *testing.T, js jetstream.JetStream, job string) []messages.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := messages.MustNames("")
	cons, err := js.OrderedConsumer(ctx, names.ResultsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.JobResultsFilter(job)}})
	require.NoError(t, err)
	var out []messages.Result
	for {
		batch, err := cons.FetchNoWait(500)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			rs, err := wire.DecodeResults(m.Data(), nil)
			require.NoError(t, err)
			out = append(out, rs...)
		}
		if n == 0 {
			return out
		}
	}
}

// The DLQ runbook's end-to-end case: 30 of 200 items fail permanently and land in
// the DLQ with their full history; once the command is fixed one replay
// brings all 30 back and the job ends with 200 succeeded and no entries.
func TestDLQThirtyOfTwoHundredReplayed(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	reg := prometheus.NewRegistry()
	startCoordinator(t, srv.URL(), coordinator.Config{Registerer: reg})
	for i := range 2 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 8}, nil)
	}
	cl := client(t, srv)
	m := newMarkers(t)
	const n, bad = 200, 30
	for i := 0; i < bad; i++ {
		m.breakItem(t, fmt.Sprintf("it-%03d", i*6))
	}
	id := submit(t, cl, fmt.Sprintf(`{"id": "thirty", "items": %s, "retry_budget": 1000,
		"agent_template": [{"name": "check", "shell": "test ! -e %s/broken-${item.id}",
			"retry_config": {"attempts": 2, "backoff": "fixed", "initial_delay": "10ms"}}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("it-%03d", i)} }), m))
	st := waitJob(t, cl, id, 90*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, bad, st.DeadLettered)
	require.EqualValues(t, n-bad, st.Succeeded)

	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, bad, "exactly one entry per failed item")
	seen := map[string]bool{}
	for _, ref := range entries {
		e := ref.Entry
		require.False(t, seen[e.ItemID], "one entry for %s", e.ItemID)
		seen[e.ItemID] = true
		require.Equal(t, messages.ReasonAttempts, e.Reason)
		require.Equal(t, names(t).WorkSubject("default", id), e.Subject)
		require.NotZero(t, e.StreamSeq)
		require.Equal(t, "default", e.Pool)
		require.Equal(t, fmt.Sprintf("%s:%d", id, e.Index), e.CorrelationID)
		require.NotEmpty(t, e.Signature)
		require.JSONEq(t, fmt.Sprintf(`{"id": %q}`, e.ItemID), string(e.Payload))
		require.Len(t, e.Attempts, 2, "every attempt of %s is kept", e.ItemID)
		for k, a := range e.Attempts {
			require.Equal(t, k+1, a.Attempt)
			require.False(t, a.Time.IsZero())
			require.NotEmpty(t, a.Agent)
			require.Equal(t, "check", a.StepName)
			require.Equal(t, "error", a.ErrorClass)
			require.NotEmpty(t, a.Message)
			require.NotNil(t, a.ExitCode)
			require.Equal(t, 1, *a.ExitCode)
			require.GreaterOrEqual(t, a.DurationMS, int64(0))
		}
		require.Equal(t, "retry", e.Attempts[0].Decision)
		require.Equal(t, "give_up", e.Attempts[1].Decision)
	}
	// The coordinator counts an entry once the DLQ stream has sourced it
	// from the pool's dead-letter stream and its monitor has read it: a
	// replay that removed it first (under -race the count stood at 15 of
	// 30 when the replay began) would leave it uncounted.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if n := counterWith(t, reg, "jetfleet_dlq_dead_lettered_total", "reason", messages.ReasonAttempts); n != bad {
			return fmt.Errorf("%v dead letters counted, want %d", n, bad)
		}
		return nil
	})

	m.fixAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, Wait: true})
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCompleted, rs.State)
	require.EqualValues(t, bad, rs.Matched)
	require.EqualValues(t, bad, rs.Replayed)
	st = waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, n, st.Succeeded)
	require.Zero(t, st.DeadLettered)
	require.Empty(t, dlqEntries(t, cl, id))

	// Progress as events on the job's subject, and the metrics.
	ev := lastEvent(t, srv, id, messages.EventReplay)
	require.Equal(t, "DLQReplayFinished", ev.Type)
	var final messages.DLQReplayStatus
	require.NoError(t, json.Unmarshal(ev.Data, &final))
	require.Equal(t, rs.ReplayID, final.ReplayID)
	require.EqualValues(t, bad, final.Replayed)
	require.EqualValues(t, bad, counter(t, reg, "jetfleet_dlq_replayed_total"))
	require.Zero(t, gauge(t, reg, "jetfleet_dlq_replays_in_progress"))
	require.EqualValues(t, bad, counterWith(t, reg, "jetfleet_dlq_dead_lettered_total", "reason", messages.ReasonAttempts))
}

// Filtered replays (by error class, by signature) replay exactly the
// matching entries; a dry run changes nothing; a replay cancelled halfway
// and run again replays each entry once.
func TestDLQFilteredDryRunAndInterruptedReplays(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 8}, nil)
	cl := client(t, srv)
	m := newMarkers(t)
	msgs := []string{"connection refused", "quota exceeded", "bad row in input"}
	const per = 10
	items := itemsJSON(3*per, func(i int) map[string]any {
		id := fmt.Sprintf("it-%02d", i)
		m.breakItem(t, id)
		return map[string]any{"id": id, "msg": msgs[i/per]}
	})
	id := submit(t, cl, fmt.Sprintf(`{"id": "filtered", "items": %s,
		"agent_template": [{"shell": "if [ -e %s/broken-${item.id} ]; then echo ${item.msg} >&2; exit 3; fi",
			"retry_config": {"attempts": 1}}]}`, items, m))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 3*per, st.DeadLettered)
	m.fixAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stats, err := cl.DLQStats(ctx, messages.DLQFilter{JobID: id})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"network": per, "rate_limit": per, "error": per}, stats.ByErrorClass)
	require.Len(t, stats.BySignature, 3)
	var badRowSig string
	for sig, ex := range stats.Examples {
		if strings.Contains(ex, "bad row") {
			badRowSig = sig
		}
	}
	require.NotEmpty(t, badRowSig)

	// A dry run counts and groups, and changes nothing.
	before := dlqState(t, srv)
	dry, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, DryRun: true})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.EqualValues(t, 3*per, dry.Matched)
	require.Equal(t, map[string]int64{id: 3 * per}, dry.ByJob)
	require.Equal(t, stats.ByErrorClass, dry.ByErrorClass)
	require.Equal(t, stats.BySignature, dry.BySignature)
	require.Equal(t, before, dlqState(t, srv))
	after, err := cl.JobStatus(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 3*per, after.DeadLettered, "a dry run does not reopen the job")

	completed := func(rs *messages.DLQReplayStatus) {
		t.Helper()
		require.Equal(t, messages.ReplayCompleted, rs.State, "%+v", rs)
	}
	// By error class: only the network ones.
	rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id, ErrorClass: "network"}, Wait: true})
	require.NoError(t, err)
	completed(rs)
	require.EqualValues(t, per, rs.Replayed)
	require.Equal(t, map[string]int64{"rate_limit": per, "error": per}, classesOf(dlqEntries(t, cl, id)))

	// By signature: only the bad rows.
	rs, err = cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id, Signature: badRowSig}, Wait: true})
	require.NoError(t, err)
	completed(rs)
	require.EqualValues(t, per, rs.Replayed)
	require.Equal(t, map[string]int64{"rate_limit": per}, classesOf(dlqEntries(t, cl, id)))

	// Interrupted: paced at 1/s and cancelled after a few, then run again.
	// At 1/s the cancel has some 7 s before the replay's end (at 5/s, 2 s
	// in all, a loaded -race run saw all of them replayed first).
	rs, err = cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, Rate: 1})
	require.NoError(t, err)
	require.Equal(t, messages.ReplayRunning, rs.State)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		all, err := cl.DLQReplays(ctx, rs.ReplayID)
		if err != nil {
			return err
		}
		if all[0].Replayed < 3 {
			return errNotYet
		}
		return nil
	})
	cancelled, err := cl.DLQReplayCancel(ctx, rs.ReplayID)
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCancelled, cancelled.State)
	require.GreaterOrEqual(t, cancelled.Replayed, int64(3))
	require.Less(t, cancelled.Replayed, int64(per), "cancelled before the end")
	require.Len(t, dlqEntries(t, cl, id), per-int(cancelled.Replayed), "the reply counts exactly what left the DLQ")

	rs, err = cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, Wait: true})
	require.NoError(t, err)
	completed(rs)
	require.EqualValues(t, per-cancelled.Replayed, rs.Replayed)
	require.Empty(t, dlqEntries(t, cl, id))

	st = waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 3*per, st.Succeeded)
	// Each item was reopened once and ran once more: one marker and one
	// result of generation 1, whatever the interruption.
	markers, gen1 := map[string]int{}, map[string]int{}
	for _, r := range jobResults(t, srv.JS(), id) {
		switch {
		case r.Outcome == messages.OutcomeReopened:
			require.Equal(t, 1, r.Generation)
			markers[r.ItemID]++
		case r.Generation == 1:
			require.Equal(t, messages.OutcomeSucceeded, r.Outcome)
			gen1[r.ItemID]++
		}
	}
	require.Len(t, markers, 3*per)
	require.Len(t, gen1, 3*per)
	for item := range markers {
		require.Equal(t, 1, markers[item], "%s reopened once", item)
		require.Equal(t, 1, gen1[item], "%s ran once after its replay", item)
	}
}

// An agent that dies after the DLQ PubAck and before Term leaves one entry
// (the next agent's publish is de-duplicated) and one outcome.
func TestAgentKilledBetweenDLQPublishAndTerm(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	permanent := map[string]agent.HandlerFunc{"doomed": func(context.Context, *agent.Call) (any, error) {
		return nil, retry.Permanent(fmt.Errorf("no such bucket"))
	}}
	died := make(chan string, 1)
	victim := startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "victim", Concurrency: 1}, testhooks.Agent{
		AfterDeadLetter: func(_, item string) bool {
			select {
			case died <- item:
			default:
			}
			return false // "crash": no result, no Term
		}}), permanent)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "killed", "items": [{"id": "x"}], "agent_template": [{"handler": "doomed"}]}`)
	select {
	case <-died:
	case <-time.After(30 * time.Second):
		t.Fatal("the item was never dead-lettered")
	}
	victim.kill(t)
	require.Len(t, dlqEntries(t, cl, id), 1)

	reg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), agent.Config{Name: "survivor", Registerer: reg}, permanent)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)
	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, 1, "one entry, not two")
	require.Equal(t, "victim", entries[0].Entry.Agent, "the survivor's publish was a duplicate")
	require.EqualValues(t, 1, dlqState(t, srv).LastSeq, "nothing else was ever stored in the DLQ")
	require.EqualValues(t, 1, counter(t, reg, "jetfleet_agent_dead_lettered_total"), "the survivor re-finalised it without running it")
}

// A pool at its dead-letter quota has its entries refused: agents keep the
// items (delayed naks) and nothing is lost; once there is room every item
// lands. The monitor warns once the pool passes 80% of its quota.
func TestFullDLQBacksOffAndLosesNothing(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	prov := testProvision
	prov.DLQMaxMsgs = 3
	creg := prometheus.NewRegistry()
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov), Registerer: creg, DLQMonitorInterval: 20 * time.Millisecond})
	areg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 8, Registerer: areg}, testhooks.Agent{Provision: prov}),
		map[string]agent.HandlerFunc{"doomed": func(context.Context, *agent.Call) (any, error) {
			return nil, retry.Permanent(fmt.Errorf("schema mismatch"))
		}})
	cl := client(t, srv)
	const n = 8
	id := submit(t, cl, fmt.Sprintf(`{"id": "full", "items": %s, "agent_template": [{"handler": "doomed"}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i} })))

	fleettest.WaitFor(t, 30*time.Second, func() error {
		if f := counter(t, areg, "jetfleet_agent_dlq_publish_failures_total"); f < n-3 {
			return fmt.Errorf("%v refused DLQ publishes so far", f)
		}
		return nil
	})
	require.EqualValues(t, 3, streamState(t, srv, wire.PoolDLQStream(names(t), messages.DefaultPool)).Msgs)
	var st *messages.JobStatus
	fleettest.WaitFor(t, 10*time.Second, func() error {
		var err error
		if st, err = cl.JobStatus(context.Background(), id); err != nil {
			return err
		}
		if st.DeadLettered != 3 {
			return fmt.Errorf("%d dead-lettered so far", st.DeadLettered)
		}
		return nil
	})
	require.Equal(t, messages.StateRunning, st.State, "the refused items are kept, not lost")

	// The monitor saw the DLQ at its limit: one warning event, the gauges.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if d := gauge(t, creg, "jetfleet_dlq_depth_messages"); d != 3 {
			return fmt.Errorf("depth %v", d)
		}
		// The monitor sets the pool's gauges one after the other: a read
		// between the two saw the depth and not yet the fill ratio.
		if r := counterWith(t, creg, "jetfleet_dlq_pool_fill_ratio", "pool", messages.DefaultPool); r != 1 {
			return fmt.Errorf("fill ratio %v", r)
		}
		return nil
	})
	ev := lastEvent(t, srv, coordinator.DLQEventsJob, messages.EventDLQ)
	require.Equal(t, "DLQNearlyFull", ev.Type)

	// Room again: every item lands.
	ctx := context.Background()
	s, err := srv.JS().Stream(ctx, wire.PoolDLQStream(names(t), messages.DefaultPool))
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = -1
	_, err = srv.JS().UpdateStream(ctx, cfg)
	require.NoError(t, err)
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, n, st.DeadLettered)
	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, n)
	items := map[string]bool{}
	for _, e := range entries {
		items[e.Entry.ItemID] = true
	}
	require.Len(t, items, n, "every item once")
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if c := counterWith(t, creg, "jetfleet_dlq_dead_lettered_total", "reason", messages.ReasonPermanent); c != n {
			return fmt.Errorf("coordinator counted %v dead letters", c)
		}
		return nil
	})
}

func names(t *testing.T) messages.Names { return messages.MustNames("") }

func dlqState(t *testing.T, srv *fleettest.Server) jetstream.StreamState {
	t.Helper()
	return streamState(t, srv, names(t).DLQStream())
}

func streamState(t *testing.T, srv *fleettest.Server, stream string) jetstream.StreamState {
	t.Helper()
	ctx := context.Background()
	s, err := srv.JS().Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	st := info.State
	st.Consumers = 0 // scans come and go
	return st
}

func lastEvent(t *testing.T, srv *fleettest.Server, job, typ string) messages.Event {
	t.Helper()
	var ev messages.Event
	fleettest.WaitFor(t, 10*time.Second, func() error {
		s, err := srv.JS().Stream(context.Background(), names(t).EventsStream())
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(context.Background(), names(t).EventSubject(job, typ))
		if err != nil {
			return err
		}
		return json.Unmarshal(m.Data, &ev)
	})
	return ev
}

func classesOf(refs []messages.DLQEntryRef) map[string]int64 {
	out := map[string]int64{}
	for _, r := range refs {
		out[r.Entry.ErrorClass]++
	}
	return out
}

// counter sums a metric family's values (all label sets).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return counterWith(t, reg, name, "", "")
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return counterWith(t, reg, name, "", "")
}

func counterWith(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// A replay is one more try: the failed step keeps the attempts it used, so
// a still-broken item that had used them all runs once and returns to the
// DLQ with that run in its history. --reset-attempts gives it all of its
// attempts again.
func TestReplayContinuesAttemptsUnlessReset(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "again", "items": [{"id": "x"}], "retry_budget": 100,
		"agent_template": [{"shell": "true"}, {"name": "flaky", "shell": "echo still broken >&2; exit 1",
			"retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms"}}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	replayOnce := func(reset bool, gen int) messages.DLQEntry {
		t.Helper()
		rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: id}, ResetAttempts: reset, Wait: true})
		require.NoError(t, err)
		require.EqualValues(t, 1, rs.Replayed, "%+v", rs)
		var entries []messages.DLQEntryRef
		fleettest.WaitFor(t, 30*time.Second, func() error {
			if entries = dlqEntries(t, cl, id); len(entries) == 0 {
				return errNotYet
			}
			return nil
		})
		require.Len(t, entries, 1)
		e := entries[0].Entry
		require.Equal(t, gen, e.Generation)
		return e
	}
	attemptsOf := func(e messages.DLQEntry, gen int) []int {
		var out []int
		for _, a := range e.Attempts {
			if a.Generation == gen {
				require.Equal(t, 1, a.Step, "only the failed step's runs are in the history")
				out = append(out, a.Attempt)
			}
		}
		return out
	}

	e := replayOnce(false, 1)
	require.Equal(t, []int{1, 2, 3}, attemptsOf(e, 0), "the first generation's history travels")
	require.Equal(t, []int{4}, attemptsOf(e, 1), "one more run, numbered on from the history")
	require.Equal(t, messages.ReasonAttempts, e.Reason)
	require.Equal(t, 1, e.ReplayCount)

	e = replayOnce(true, 2)
	require.Equal(t, []int{1, 2, 3}, attemptsOf(e, 2), "--reset-attempts: every attempt again")
	require.Equal(t, 2, e.ReplayCount)

	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)
	require.EqualValues(t, 1, st.Items)
}
