package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var testProv = provision.Config{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}

// running is a coordinator or agent started by a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (p *running) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop")
	}
}

func startCoord(t *testing.T, srv *fleettest.Server, cfg Config) (*Coordinator, *running) {
	t.Helper()
	cfg.Provision, cfg.StatusInterval = Provision(testProv), 20*time.Millisecond
	c, err := New(srv.Connect(t), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-p.done:
		t.Fatalf("coordinator exited: %v", err)
	}
	return c, p
}

// broken is the set of items the test handler fails permanently.
type broken struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (b *broken) set(ids ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids = map[string]bool{}
	for _, id := range ids {
		b.ids[id] = true
	}
}

func (b *broken) handler(_ context.Context, c *agent.Call) (any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ids[c.ItemID] {
		return nil, retry.Permanent(errors.New("disk full"))
	}
	return "ok", nil
}

func waitEnd(t *testing.T, cl *Client, id string) *messages.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := cl.Wait(ctx, id, 10*time.Millisecond, nil)
	require.NoError(t, err)
	return st
}

// A finished job replayed twice (its items failing again the first time),
// across a coordinator restart: the job reopens each time, its counts move
// between dead_lettered and succeeded, and rebuilding them from the results
// stream gives the same numbers.
func TestReplayReopensAFinishedJob(t *testing.T) {
	fleettest.VerifyNoLeaks(t)
	srv := fleettest.RunServer(t)
	// Runners stop following finished jobs at once, so each replay restarts one.
	cfg := Config{LateResultWindow: time.Millisecond}
	c1, p1 := startCoord(t, srv, cfg)
	var b broken
	b.set("i1", "i3", "i5")
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{Name: "a1"}, testhooks.Agent{Provision: testProv})).Handle("maybe", b.handler)
	go func() { adone <- a.Run(actx) }()
	defer func() { acancel(); require.NoError(t, <-adone) }()

	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	reply, err := cl.Submit(ctx, []byte(`{"id": "reo", "items": [{"id": "i0"}, {"id": "i1"}, {"id": "i2"}, {"id": "i3"}, {"id": "i4"}, {"id": "i5"}],
		"agent_template": [{"handler": "maybe"}]}`))
	require.NoError(t, err)
	st := waitEnd(t, cl, reply.JobID)
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 3, st.DeadLettered)
	require.EqualValues(t, 3, st.Succeeded)
	waitNoRunner(t, c1, "reo")

	// Replay 1, still broken: the items dead-letter again as generation 1.
	rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "reo"}, Wait: true})
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCompleted, rs.State)
	require.EqualValues(t, 3, rs.Matched)
	require.EqualValues(t, 3, rs.Replayed)
	st = waitEnd(t, cl, "reo")
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 3, st.DeadLettered, "%+v", st)
	require.EqualValues(t, 3, st.Succeeded)
	page, err := cl.DLQList(ctx, messages.DLQFilter{JobID: "reo"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 3)
	for _, ref := range page.Entries {
		require.Equal(t, 1, ref.Entry.Generation)
		require.Equal(t, 1, ref.Entry.ReplayCount)
		require.Len(t, ref.Entry.Attempts, 2, "the first generation's attempt travelled with the item")
	}

	// A new coordinator; the job is finished, so nothing follows it.
	p1.stop(t)
	c2, p2 := startCoord(t, srv, cfg)
	defer p2.stop(t)
	require.Nil(t, c2.runner("reo"))

	// Replay 2, fixed.
	b.set()
	rs, err = cl.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "reo"}, Wait: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, rs.Replayed)
	st = waitEnd(t, cl, "reo")
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 6, st.Succeeded)
	require.Zero(t, st.DeadLettered)
	require.Equal(t, st.Items, st.Done())
	page, err = cl.DLQList(ctx, messages.DLQFilter{JobID: "reo"})
	require.NoError(t, err)
	require.Empty(t, page.Entries)

	// Rebuilding from the results stream (what a restart does) gives the same counts.
	waitNoRunner(t, c2, "reo")
	rec, err := c2.store.get(ctx, "reo")
	require.NoError(t, err)
	rebuilt := newJobRunner(c2, *rec, 0)
	results := readResults(t, srv.JS(), "reo")
	require.Len(t, results, 6+3+3+3+3, "6 outcomes, then per replay 3 markers and 3 outcomes")
	for i := range results {
		rebuilt.apply(&results[i])
	}
	got := rebuilt.snapshot().Status
	require.Equal(t, st.Succeeded, got.Succeeded)
	require.Equal(t, st.DeadLettered, got.DeadLettered)
	require.Equal(t, st.NotRun, got.NotRun)
	require.Equal(t, st.Retries, got.Retries)
}

// A replay of entries whose job no longer exists fails them and keeps them.
func TestReplayOfAnUnknownJobFails(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	names := messages.MustNames("")
	data, _ := json.Marshal(messages.DLQEntry{JobID: "ghost", ItemID: "x", Subject: names.WorkSubject("default", "ghost"), Reason: messages.ReasonJobGone})
	_, err := srv.JS().Publish(context.Background(), names.DLQSubject("default", "ghost"), data)
	require.NoError(t, err)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	rs, err := cl.DLQReplay(context.Background(), messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "ghost"}, Wait: true})
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCompleted, rs.State)
	require.EqualValues(t, 1, rs.Failed)
	require.Zero(t, rs.Replayed)
	require.Contains(t, rs.LastError, `job "ghost" does not exist`)
	page, err := cl.DLQList(context.Background(), messages.DLQFilter{JobID: "ghost"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
}

func TestDLQAPIValidation(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		endpoint string
		req      string
		code     string
		field    string
	}{
		{"purge needs confirm", messages.EndpointDLQPurge, `{"job_id": "j"}`, messages.CodeBadRequest, "confirm"},
		{"bad job id", messages.EndpointDLQList, `{"job_id": "a.b"}`, messages.CodeBadRequest, "job_id"},
		{"unknown field", messages.EndpointDLQStats, `{"jobid": "j"}`, messages.CodeBadRequest, ""},
		{"until before since", messages.EndpointDLQReplay, `{"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}`, messages.CodeBadRequest, "until"},
		{"negative rate", messages.EndpointDLQReplay, `{"rate": -1}`, messages.CodeBadRequest, "rate"},
		{"wait too long", messages.EndpointDLQReplay, `{"wait": true, "wait_timeout": "1h"}`, messages.CodeBadRequest, "wait_timeout"},
		{"get needs seq", messages.EndpointDLQGet, `{}`, messages.CodeBadRequest, "seq"},
		{"get unknown seq", messages.EndpointDLQGet, `{"seq": 12345}`, messages.CodeNotFound, "seq"},
		{"cancel needs id", messages.EndpointDLQReplayCancel, `{}`, messages.CodeBadRequest, "replay_id"},
		{"cancel unknown id", messages.EndpointDLQReplayCancel, `{"replay_id": "nope"}`, messages.CodeNotFound, "replay_id"},
		{"status of unknown id", messages.EndpointDLQReplays, `{"replay_id": "nope"}`, messages.CodeNotFound, "replay_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cl.Call(ctx, tc.endpoint, []byte(tc.req), nil)
			var ae *messages.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, tc.code, ae.Code, ae.Error())
			require.Equal(t, tc.field, ae.Field, ae.Error())
		})
	}
	// Empty DLQ: everything answers, with zeros.
	st, err := cl.DLQStats(ctx, messages.DLQFilter{})
	require.NoError(t, err)
	require.Zero(t, st.Total)
	require.NotNil(t, st.Stream)
	rs, err := cl.DLQReplay(ctx, messages.DLQReplayRequest{DryRun: true})
	require.NoError(t, err)
	require.True(t, rs.DryRun)
	require.Zero(t, rs.Matched)
	n, err := cl.DLQPurge(ctx, messages.DLQPurgeRequest{Confirm: true})
	require.NoError(t, err)
	require.Zero(t, n)
}

func waitNoRunner(t *testing.T, c *Coordinator, id string) {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if c.runner(id) != nil {
			return fmt.Errorf("job %s still followed", id)
		}
		return nil
	})
}

func readResults(t *testing.T, js jetstream.JetStream, job string) []messages.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := messages.MustNames("")
	s, err := js.Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []messages.Result
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil || wire.Origin(names, m.Subject) == "" || !strings.HasSuffix(m.Subject, "."+job) {
			continue
		}
		rs, err := wire.DecodeResults(m.Data, nil)
		require.NoError(t, err)
		out = append(out, rs...)
	}
	return out
}
