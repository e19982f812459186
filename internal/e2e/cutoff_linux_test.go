//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// TestCutOffCoordinatorHandsOver: the leading coordinator's node is taken
// off the cluster network (its client connection stays up, as with
// `docker network disconnect` of the node). The coordinator moves to
// another server (natsconn.CutOff), the lease is written again (taken by
// the other coordinator, or renewed by the cut-off one from its new
// server), status keeps answering through a client with
// WithFailover, and the job ends with every item counted once. The
// measured times are logged (docs/deploy.md, "Faults").
func TestCutOffCoordinatorHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster and a partition")
	}
	if raceEnabled {
		// Its bound is on how long status goes unanswered through a
		// cut-off: under the race detector, beside the other packages'
		// tests, the lease write alone took up to 12 s. .ci/run runs it
		// without -race.
		t.Skip("timed fault: run without -race")
	}
	t.Parallel()
	const n, id = 1600, "cutoff"
	// Routes are given up after 3 missed pings 500 ms apart, as the
	// compose cluster does after 3 missed pings 2 s apart.
	c := fleettest.RunCluster(t, 3, fleettest.WithPartitions(), fleettest.WithConfig(func(o *server.Options) {
		o.Cluster.PingInterval = 500 * time.Millisecond
		o.Cluster.MaxPingsOut = 3
	}))
	urls := strings.Split(c.URLs(), ",")
	// via connects to the nodes in the order given, first to the first.
	via := func(nodes ...int) *nats.Conn {
		var us []string
		for _, i := range nodes {
			us = append(us, urls[i])
		}
		nc, err := nats.Connect(strings.Join(us, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	prov := testProvision
	prov.Replicas = 3
	start := func(name string, nc *nats.Conn) *nats.Conn {
		cfg := coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 50 * time.Millisecond, Holder: name}
		cfg.Logger = testLogger(t).With().Str("proc", name).Logger()
		co, err := coordinator.New(nc, cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- co.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("coordinator did not stop within 30s")
			}
		})
		select {
		case <-co.Ready():
		case err := <-done:
			t.Fatalf("coordinator %s exited early: %v", name, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("coordinator %s not ready", name)
		}
		return nc
	}
	// The one to be cut off leads: it starts first, on node 2.
	ncA := start("coord-a", via(2, 0, 1))
	// The lease is read through the nodes that stay (the cluster's own
	// connection may be on node 2).
	observer, err := jetstream.New(via(0, 1))
	require.NoError(t, err)
	ctl := func() (lease.Value, uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		kv, err := observer.KeyValue(ctx, messages.MustNames("").ControlBucket())
		if err != nil {
			return lease.Value{}, 0, err
		}
		e, err := kv.Get(ctx, wire.LeaseKey)
		if err != nil {
			return lease.Value{}, 0, err
		}
		var v lease.Value
		err = json.Unmarshal(e.Value(), &v)
		return v, e.Revision(), err
	}
	holder := func(want string) func() error {
		return func() error {
			v, _, err := ctl()
			if err == nil && v.Holder != want {
				err = fmt.Errorf("lease held by %q, want %q", v.Holder, want)
			}
			return err
		}
	}
	fleettest.WaitFor(t, 30*time.Second, holder("coord-a"))
	start("coord-b", via(0, 1, 2))

	// An item runs when the test hands it a token (or once the gate is
	// open): the job runs for as long as the test needs, whatever the
	// machine's speed.
	tokens, open := make(chan struct{}, n), make(chan struct{})
	defer func() {
		select {
		case <-open:
		default:
			close(open)
		}
	}()
	gated := func(ctx context.Context, _ *agent.Call) (any, error) {
		select {
		case <-tokens:
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	}
	for range 40 {
		tokens <- struct{}{}
	}
	ag := testhooks.WithAgent(agent.Config{Name: "a0", Concurrency: 4}, testhooks.Agent{Provision: prov})
	startAgentOn(t, via(1, 0), ag, map[string]agent.HandlerFunc{"slow": gated})
	cl, err := jfclient.New(via(1, 0, 2), "", jfclient.WithFailover())
	require.NoError(t, err)
	submit(t, cl, fmt.Sprintf(`{"id": %q, "items": %s, "agent_template": [{"handler": "slow"}]}`, id,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("i%d", i)} })))
	waitSucceeded(t, cl, id, 40)

	stop := answerGaps(func(ctx context.Context) error { _, err := cl.JobStatus(ctx, id); return err })
	before := status(t, cl, id).Succeeded
	meta := c.MetaLeader()
	_, leaseRev, err := ctl()
	require.NoError(t, err)
	// The raft groups node 2 leads when it is cut off, and when nodes 0 and
	// 1 have elected a leader of each: until then what needs the group
	// (the meta leader: consumers; a stream's leader: its reads and writes)
	// waits.
	led := led2(t, c, observer, meta == 2)
	c.Cut(2)
	cut := time.Now()
	elected := led.watch(cut, "KV_"+messages.MustNames("").ControlBucket())
	// Each outcome's time after the cut, as first seen.
	var takeover, moved, resumed time.Duration
	var newHolder string
	seen := func(d *time.Duration, ok bool) {
		if ok && *d == 0 {
			*d = time.Since(cut).Round(10 * time.Millisecond)
		}
	}
	fleettest.WaitFor(t, 60*time.Second, func() error {
		// Led again: the lease written after the cut (taken by coord-b,
		// or renewed by coord-a once it moved to a server that reaches
		// the cluster, if its lease had not been taken meanwhile).
		if v, rev, err := ctl(); err == nil && rev > leaseRev && takeover == 0 {
			seen(&takeover, true)
			newHolder = v.Holder
		}
		select { // one more item may run: a result after the cut says the job resumed
		case tokens <- struct{}{}:
		default:
		}
		s := ncA.ConnectedServerName()
		seen(&moved, s != "" && s != c.NodeName(2))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cl.JobStatus(ctx, id)
		cancel()
		seen(&resumed, err == nil && st.Succeeded > before)
		if takeover == 0 || moved == 0 || resumed == 0 {
			return fmt.Errorf("after %s: lease written %s, coord-a moved %s, job resumed %s", time.Since(cut), takeover, moved, resumed)
		}
		return nil
	})
	require.Less(t, status(t, cl, id).Succeeded, int64(n), "the job must still run when it resumes")
	gap := stop()
	elections, lastElected, controlElected := elected()
	bound := max(lastElected, lease.DefaultTTL) + cutOffStatusSlack
	if controlElected > 0 {
		// The lease's bucket was led by node 2: the contender reads the
		// lease again only once it has a leader off node 2, and then
		// waits the lease's TTL from the first read of its last
		// revision, as it would had it seen that write happen.
		bound = max(bound, controlElected+lease.DefaultTTL/4+lease.DefaultTTL+cutOffStatusSlack) // TTL/4: its renewal interval
	}
	t.Logf("node 2 (meta leader then: node %d) cut off with the leading coordinator on it: %s wrote the lease after %s (lease TTL %s), "+
		"coord-a moved to %s after %s, the job counted a result again after %s; status went unanswered for %s at most; "+
		"leaders elected off node 2 after: %s (status's bound: %s)",
		meta, newHolder, takeover, lease.DefaultTTL, ncA.ConnectedServerName(), moved, resumed, gap.Round(10*time.Millisecond), elections, bound)

	c.Heal(2)
	close(open)
	st := waitJobOr(t, cl, id, 2*time.Minute, func() { dumpStall(t, c, observer, id) })
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, n, st.Succeeded, "every item counted once: %+v", st)
	require.LessOrEqual(t, gap, bound, "status answered through the cut, within %s of the last election off node 2 (or of the lease's TTL)", cutOffStatusSlack)
}

// dumpStall logs, for a job that did not end, what the work and results
// streams and their consumers hold (which side stalled: the agents' pull,
// or the leader's reading of results; as each node sees them, and as the
// leaders answer), and writes every goroutine's stack to a file in the
// temporary directory (its name is logged). Once in 5 runs the job stayed
// at 88 of 1,600 after the heal, with no error logged (docs/benchmarks.md,
// the quiet pair of internal/e2e).
func dumpStall(t *testing.T, c *fleettest.Cluster, js jetstream.JetStream, job string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := messages.MustNames("")
	if s, err := js.Stream(ctx, names.ResultsStream()); err == nil {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(names.JobResultsFilter(job)))
		if err == nil {
			var n uint64
			for _, k := range info.State.Subjects {
				n += k
			}
			t.Logf("stall: results messages of job %s stored: %d (a message may hold a batch of results)", job, n)
		}
	}
	// Each node's own replicas and consumers: a replica that lags, or a
	// consumer on one, shows here and not in the leader's answers.
	for i := range 3 {
		jsz, err := c.Server(i).Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
		if err != nil {
			t.Logf("stall: node %d: %v", i, err)
			continue
		}
		for _, acc := range jsz.AccountDetails {
			for _, sd := range acc.Streams {
				if sd.Name != names.WorkStream() && sd.Name != names.ResultsStream() {
					continue
				}
				leader := ""
				if sd.Cluster != nil {
					leader = sd.Cluster.Leader
				}
				t.Logf("stall: node %d: stream %s (leader %q): msgs %d, last %d", i, sd.Name, leader, sd.State.Msgs, sd.State.LastSeq)
				for _, ci := range sd.Consumer {
					cl := ""
					if ci.Cluster != nil {
						cl = ci.Cluster.Leader
					}
					t.Logf("stall: node %d: consumer %s/%s (leader %q): delivered %d, ack floor %d, num_pending %d, num_ack_pending %d, num_waiting %d",
						i, sd.Name, ci.Name, cl, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumWaiting)
				}
			}
		}
	}
	for _, sn := range []string{names.WorkStream(), names.ResultsStream()} {
		s, err := js.Stream(ctx, sn)
		if err != nil {
			t.Logf("stall: stream %s: %v", sn, err)
			continue
		}
		st := s.CachedInfo().State
		t.Logf("stall: stream %s: msgs %d, first %d, last %d, consumers %d", sn, st.Msgs, st.FirstSeq, st.LastSeq, st.Consumers)
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			t.Logf("stall: consumer %s/%s: delivered %d, ack floor %d, num_pending %d, num_ack_pending %d, num_waiting %d, redelivered %d",
				sn, ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.NumRedelivered)
		}
		if err := infos.Err(); err != nil {
			t.Logf("stall: consumers of %s: %v", sn, err)
		}
	}
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	f := filepath.Join(os.TempDir(), fmt.Sprintf("cutoff-stall-%d.txt", time.Now().UnixNano()))
	if err := os.WriteFile(f, buf, 0o644); err == nil {
		t.Logf("stall: goroutines in %s", f)
	}
}

// cutOffStatusSlack bounds how long status goes unanswered, when the
// leading coordinator's node is cut off, after the later of two things
// jetfleet does not decide: the last raft election among the groups node 2
// led (nats-server 2.15 elects 4-9 s after a leader's last heartbeat, and
// later on a loaded machine: up to 10.5 s seen beside the scale tests),
// and the lease's TTL (when node 2 led none of the control bucket, the
// results stream or the meta group, coord-b takes the lease once it
// expires). Only a leader whose results hub runs answers status. After
// those: up to a lease renewal interval (1 s) until the contender reads
// the lease again and takes it, up to a second until the hub's next
// attempt (jobrun's hubAttempt), a status request's own 1 s timeout
// (answerGaps), and a second for a loaded machine. Measured at load
// 16-35: 4.5-9.5 s in all with the stream leaders where they fell; once
// 13.6 s, when the other coordinator took the control bucket's election
// for its own server being cut off and moved its connection. The bound
// was an absolute 13 s until a fresh CI machine running the scale tests
// beside it went past it: the elections are the server's, and are
// measured, not bounded, here. When node 2 led the lease's own bucket, the
// contender reads the lease again only after that bucket's election, and
// then waits the TTL from the first read of its last revision (it cannot
// know when that was written): status then comes back within that
// election, a renewal interval, the TTL and this slack (11.2 s seen with
// the bucket elected after 6.1 s, the other groups before, beside
// internal/jobrun's tests).
const cutOffStatusSlack = 4 * time.Second

// startAgentOn is startAgent on a connection of the test's making.
func startAgentOn(t *testing.T, nc *nats.Conn, cfg agent.Config, handlers map[string]agent.HandlerFunc) {
	t.Helper()
	testhooks.UpdateAgent(&cfg, func(h *testhooks.Agent) {
		if h.Provision == (provision.Config{}) {
			h.Provision = testProvision
		}
	})
	cfg.ShutdownTimeout = 5 * time.Second
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	cfg.Logger = testLogger(t).With().Str("proc", cfg.Name).Logger()
	a := agent.New(nc, cfg).HandleBuiltins()
	for name, fn := range handlers {
		a.Handle(name, fn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := a.Run(ctx)
		if err != nil && ctx.Err() == nil {
			// Said at once: the test would otherwise wait out its bound
			// for items no agent runs.
			t.Errorf("agent %s stopped: %v", cfg.Name, err)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s")
		}
	})
}

// leaders2 are the raft groups node 2 of c leads: "meta" and streams.
type leaders2 struct {
	c      *fleettest.Cluster
	groups []string
}

// led2 lists the raft groups node 2 leads (the meta group when meta).
func led2(t *testing.T, c *fleettest.Cluster, js jetstream.JetStream, meta bool) leaders2 {
	l := leaders2{c: c}
	if meta {
		l.groups = append(l.groups, "meta")
	}
	names := js.StreamNames(context.Background())
	for s := range names.Name() {
		if c.StreamLeader(s) == 2 {
			l.groups = append(l.groups, s)
		}
	}
	require.NoError(t, names.Err())
	return l
}

// elsewhere reports whether node 0 or 1 leads group.
func (l leaders2) elsewhere(group string) bool {
	for i := range 2 {
		s := l.c.Server(i)
		if group == "meta" {
			if s.JetStreamIsLeader() {
				return true
			}
			continue
		}
		if acc, err := s.LookupAccount(server.DEFAULT_GLOBAL_ACCOUNT); err == nil && acc.JetStreamIsStreamLeader(group) {
			return true
		}
	}
	return false
}

// watch polls, from since, for each group's leader off node 2; the
// returned func stops it and says when each was elected, when the last of
// those elected so far was, and when group control was (0: node 2 did
// not lead it, or it has no leader off node 2 yet).
func (l leaders2) watch(since time.Time, control string) func() (string, time.Duration, time.Duration) {
	at := make([]time.Duration, len(l.groups))
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for left := len(l.groups); left > 0; {
			for i, g := range l.groups {
				if at[i] == 0 && l.elsewhere(g) {
					at[i], left = time.Since(since).Round(10*time.Millisecond), left-1
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() (string, time.Duration, time.Duration) {
		close(done)
		<-stopped
		var out []string
		var last, ctl time.Duration
		for i, g := range l.groups {
			out = append(out, fmt.Sprintf("%s %s", g, at[i]))
			last = max(last, at[i])
			if g == control {
				ctl = at[i]
			}
		}
		return strings.Join(out, ", "), last, ctl
	}
}
