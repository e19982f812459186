package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
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

// runs records the items a handler ran, by pool.
type runs struct {
	mu sync.Mutex
	by map[string][]string // pool → "job/item payload"
}

func (r *runs) handler(pool string) agent.HandlerFunc {
	return func(_ context.Context, c *agent.Call) (any, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.by[pool] = append(r.by[pool], c.JobID+"/"+c.ItemID+" "+string(c.Item))
		return nil, nil
	}
}

func (r *runs) of(pool string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.by[pool]...)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// counter reads a counter of reg with one label pair.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// An agent of pool default tries to run work nobody submitted: a forged
// item for a job of pool gpu, sent into its own pool through a schedule
// (schedules aimed at pool gpu are refused by the server, see
// TestRollupsCannotWipeSharedState); a repeating schedule of an item the
// coordinator really signed; and a dead letter whose index is outside its
// job, which an operator then replays. The coordinator signs work items
// with the key `fleetctl auth init` wrote and the agents verify them:
// nothing forged runs, the replay of the forged dead letter fails at once,
// and both pools' jobs finish with exact counts.
func TestForgedWorkIsRefused(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := s.names

	seed, err := os.ReadFile(s.res.WorkSigningSeed)
	require.NoError(t, err)
	signer, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	require.NoError(t, err)
	verifier, err := nkeys.FromPublicKey(s.res.WorkPublicKey)
	require.NoError(t, err)

	cnc, cerrs := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond, WorkSigner: signer})
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

	// The agents' logs, shown if the test fails.
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agents' logs:\n%s", logs.String())
		}
	})
	ran := &runs{by: map[string][]string{}}
	regs := map[string]*prometheus.Registry{}
	var aerrs []*asyncErrs
	for _, pool := range []string{"default", "gpu"} {
		nc, ae := s.connect(t, auth.AgentUser(pool))
		aerrs = append(aerrs, ae)
		regs[pool] = prometheus.NewRegistry()
		a := agent.New(nc, agent.Config{Pool: pool, Name: "real-" + pool, WorkVerifier: verifier,
			Registerer: regs[pool], ShutdownTimeout: time.Second,
			Logger: zerolog.New(logs).With().Timestamp().Str("agent", pool).Logger()}).Handle("record", ran.handler(pool))
		go func() { done <- a.Run(runCtx) }()
	}

	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	for _, spec := range []string{
		`{"id": "victim", "pool": "gpu", "items": [{"id": "v0"}, {"id": "v1"}, {"id": "v2"}], "agent_template": [{"handler": "record"}]}`,
		`{"id": "own", "items": [{"id": "o0"}, {"id": "o1"}, {"id": "o2"}], "agent_template": [{"handler": "record"}]}`,
	} {
		_, err := sub.JobSubmit(ctx, []byte(spec))
		require.NoError(t, err)
	}
	for _, job := range []string{"victim", "own"} {
		st, err := sub.JobWait(ctx, job, 20*time.Millisecond, nil)
		require.NoError(t, err)
		require.Equal(t, messages.StateSucceeded, st.State, "%s: %+v", job, st)
		require.EqualValues(t, 3, st.Succeeded, job)
	}

	// The attacker: pool default's key.
	dnc, _ := s.connect(t, auth.AgentUser("default"))
	djs, err := jetstream.New(dnc)
	require.NoError(t, err)
	schedule := func(item string, wi wire.WorkItem, pattern string) {
		t.Helper()
		data, err := json.Marshal(&wi)
		require.NoError(t, err)
		m := nats.NewMsg(wire.ParkSubject(names, "default", wi.JobID, item))
		m.Data = data
		m.Header.Set(wire.HeaderSchedule, pattern)
		m.Header.Set(wire.HeaderScheduleTarget, wire.ParkDueSubject(names, "default", wi.JobID))
		_, err = djs.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	now := "@at " + time.Now().UTC().Format(time.RFC3339)
	// A forged item of pool gpu's job, into pool default, unsigned and
	// claiming a replay's generation (which skips the job-ended check).
	schedule("f1", wire.WorkItem{JobID: "victim", ItemID: "v0", Index: 0, Generation: 1,
		Payload: json.RawMessage(`{"id":"v0","evil":1}`)}, now)
	// A forged item of its own pool's job, signed for pool gpu.
	forged := wire.WorkItem{JobID: "own", ItemID: "o1", Index: 1, Generation: 1, Payload: json.RawMessage(`{"id":"o1","evil":2}`)}
	sig, err := signer.Sign(forged.SignedBytes("gpu"))
	require.NoError(t, err)
	forged.Sig = wire.EncodeSig(sig)
	schedule("f2", forged, now)
	// A genuine, signed item of its own pool, repeated every second.
	genuine := wire.WorkItem{JobID: "own", ItemID: "o2", Index: 2, Generation: 1, Payload: json.RawMessage(`{"id":"o2","evil":3}`)}
	sig, err = signer.Sign(genuine.SignedBytes("default"))
	require.NoError(t, err)
	genuine.Sig = wire.EncodeSig(sig)
	schedule("f3", genuine, "@every 1s")

	// Every forgery is refused: the repeating one at every firing, the two
	// unsigned for this pool at each delivery until their third, when they
	// are dead-lettered as bad_signature (only the pool's agents can put
	// them there, and they may dead-letter their pool's items anyway). The
	// forgeries are published after both jobs are seen
	// finished, so the coordinator's purge of their parked retries is done
	// (it runs before the finished state is written) and does not remove
	// them. This takes a few seconds; the wait is long for a loaded CI run.
	natstest.WaitFor(t, 90*time.Second, func() error {
		if n := counter(t, regs["default"], "jetfleet_agent_items_total", "outcome", "refused"); n < 7 {
			return fmt.Errorf("%v deliveries refused", n)
		}
		if n := counter(t, regs["default"], "jetfleet_agent_dead_lettered_total", "reason", messages.ReasonBadSignature); n < 2 {
			return fmt.Errorf("%v forged items dead-lettered", n)
		}
		return nil
	})
	for _, r := range append(ran.of("default"), ran.of("gpu")...) {
		require.NotContains(t, r, "evil", "a forged item ran")
	}
	require.Len(t, ran.of("gpu"), 3)
	require.Len(t, ran.of("default"), 3)

	// A dead letter of job own with an index outside the job: its replay
	// fails at once, and own stays finished with its counts.
	_, err = djs.Publish(ctx, wire.PoolDLQSubject(names, "default", "own"), mustJSON(t, messages.DLQEntry{JobID: "own", ItemID: "o9", Index: 99,
		Pool: "default", Payload: json.RawMessage(`{"id":"o9"}`), Reason: messages.ReasonAttempts}))
	require.NoError(t, err)
	onc, _ := s.connect(t, "operator")
	op, err := client.New(onc, "")
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	rs, err := op.DLQReplay(rctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "own", Reason: messages.ReasonAttempts}, Wait: true})
	rcancel()
	require.NoError(t, err)
	require.Equal(t, messages.ReplayCompleted, rs.State, "%+v", rs)
	require.EqualValues(t, 0, rs.Replayed, "%+v", rs)
	require.EqualValues(t, 1, rs.Failed, "%+v", rs)
	require.Contains(t, rs.LastError, "outside job own")
	for _, job := range []string{"victim", "own"} {
		st, err := sub.JobStatus(ctx, job)
		require.NoError(t, err)
		require.Equal(t, messages.StateSucceeded, st.State, "%s: %+v", job, st)
		require.EqualValues(t, 3, st.Succeeded, job)
		require.EqualValues(t, 3, st.Items, job)
	}

	stop()
	for range 3 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	require.Empty(t, cerrs.violations(), "the coordinator was refused something it needs")
	for _, ae := range aerrs {
		require.Empty(t, ae.violations(), "an agent was refused something it needs")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// The agents' verify key is not the coordinator's: every work item is
// refused. The job does not hang: after unsignedDeliveries deliveries each
// item is dead-lettered as bad_signature, the job ends failed and its
// status names the problem. Once the agent has the right key, a replay of
// the dead letters runs the items and the job succeeds.
func TestMismatchedWorkKeysFailVisibly(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	seed, err := os.ReadFile(s.res.WorkSigningSeed)
	require.NoError(t, err)
	signer, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	require.NoError(t, err)
	right, err := nkeys.FromPublicKey(s.res.WorkPublicKey)
	require.NoError(t, err)
	other, err := nkeys.CreateAccount()
	require.NoError(t, err)
	otherPub, err := other.PublicKey()
	require.NoError(t, err)
	wrong, err := nkeys.FromPublicKey(otherPub)
	require.NoError(t, err)

	cnc, _ := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond, WorkSigner: signer})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 3)
	go func() { done <- coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	_, err = provision.EnsurePool(ctx, cjs, s.names, "default", provision.Config{AckWait: 5 * time.Second})
	require.NoError(t, err)

	// The agents' logs, shown if the test fails.
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agents' logs:\n%s", logs.String())
		}
	})
	ran := &runs{by: map[string][]string{}}
	startAgent := func(v agent.Verifier) context.CancelFunc {
		nc, _ := s.connect(t, auth.AgentUser("default"))
		actx, acancel := context.WithCancel(runCtx)
		a := agent.New(nc, agent.Config{Name: "agent", WorkVerifier: v, ShutdownTimeout: time.Second}).Handle("record", ran.handler("default"))
		go func() { done <- a.Run(actx) }()
		return acancel
	}
	stopWrong := startAgent(wrong)

	snc, _ := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "keys", "items": [{"id": "k0"}, {"id": "k1"}, {"id": "k2"}], "agent_template": [{"handler": "record"}]}`))
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	st, err := sub.JobWait(wctx, "keys", 20*time.Millisecond, nil)
	wcancel()
	require.NoError(t, err, "the job hung on work its agents refused")
	require.Equal(t, messages.StateFailed, st.State, "%+v", st)
	require.EqualValues(t, 3, st.DeadLettered, "%+v", st)
	require.Empty(t, ran.of("default"), "nothing ran")
	out, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(out), "no valid coordinator signature", "the status names the problem")
	require.Contains(t, string(out), "--work-verify-key", "the status says what to check")

	// The operator fixes the agent's key and replays the dead letters.
	stopWrong()
	require.NoError(t, <-done)
	startAgent(right)
	onc, _ := s.connect(t, "operator")
	op, err := client.New(onc, "")
	require.NoError(t, err)
	rs, err := op.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "keys", Reason: messages.ReasonBadSignature}, Wait: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, rs.Replayed, "%+v", rs)
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, err := sub.JobStatus(ctx, "keys")
		if err != nil {
			return err
		}
		if st.State != messages.StateSucceeded || st.Succeeded != 3 {
			return fmt.Errorf("after the replay: %s, %d succeeded", st.State, st.Succeeded)
		}
		return nil
	})
	require.Len(t, ran.of("default"), 3)

	stop()
	for range 2 { // the coordinator and the agent with the right key
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}
