//go:build linux

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// statusAnswer is one status a poller got: when its request was sent and
// its answer came back, and the done count.
type statusAnswer struct {
	client     string
	sent, got  time.Time
	done       int64
	source     string
	terminal   bool
	asOf       time.Time
	serverName string
}

// statusPoller asks for a job's status again and again through one client
// and keeps every answer.
type statusPoller struct {
	name string
	cl   *jfclient.Client
	nc   *nats.Conn

	mu      sync.Mutex
	answers []statusAnswer
	errs    int
}

func (p *statusPoller) run(stop <-chan struct{}, id string) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		server := p.nc.ConnectedServerName()
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := p.cl.JobStatus(ctx, id)
		cancel()
		got := time.Now()
		p.mu.Lock()
		if err != nil {
			p.errs++
		} else {
			a := statusAnswer{client: p.name, sent: sent, got: got, done: st.Done(), source: st.Source,
				terminal: messages.TerminalState(st.State), serverName: server}
			if st.AsOf != nil {
				a.asOf = *st.AsOf
			}
			p.answers = append(p.answers, a)
		}
		p.mu.Unlock()
		if err != nil {
			// A moment before asking again: no coordinator through this server.
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (p *statusPoller) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.answers)
}

// TestStatusNeverGoesBackThroughACutOff: the node that leads the job
// records' stream (KV_fleet_jobs) is cut off the cluster in the middle of
// a job and healed. Coordinators on it and on another node serve status,
// and clients on every node (some moving off a cut-off server, one that
// cannot) ask for it throughout. No answer is older than one already
// given, to any client: an answer to a request sent after another answer
// came back has at least its done count (docs/design.md, "Status never
// goes back").
func TestStatusNeverGoesBackThroughACutOff(t *testing.T) {
	t.Parallel() // its own server or cluster; no rate or fault timing
	if testing.Short() {
		t.Skip("a 3-node cluster and a partition")
	}
	const n, id = 1200, "mono"
	c := fleettest.RunCluster(t, 3, fleettest.WithPartitions(), fleettest.WithConfig(func(o *server.Options) {
		o.Cluster.PingInterval = 500 * time.Millisecond
		o.Cluster.MaxPingsOut = 3
	}))
	urls := strings.Split(c.URLs(), ",")
	via := func(nodes ...int) *nats.Conn {
		var us []string
		for _, i := range nodes {
			us = append(us, urls[i])
		}
		nc, err := nats.Connect(strings.Join(us, ","), nats.DontRandomize(), nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond), nats.IgnoreDiscoveredServers())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	prov := testProvision
	prov.Replicas = 3
	start := func(name string, nc *nats.Conn) *coordinator.Coordinator {
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
		return co
	}
	// The leader starts first, on a node that stays; then the job
	// records' stream exists and has a leader: the node to cut off.
	coA := start("coord-a", via(0, 1, 2))
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if coA.Leader() != "coord-a" {
			return errNotYet
		}
		return nil
	})
	jobsStream := "KV_" + messages.MustNames("").JobsBucket()
	cut := c.WaitForStreamLeader(t, jobsStream)
	for cut == 0 {
		// coord-a's connection is on node 0: move the records' leader
		// away from it, so that the leader stays on the cluster.
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cut, err = c.StepDownStreamLeader(ctx, jobsStream)
		cancel()
		require.NoError(t, err)
	}
	stay := 0
	other := 3 - cut // the third node
	// A coordinator on the node to cut off: it keeps serving its clients
	// there for a while.
	start("coord-b", via(cut, stay, other))

	ag := testhooks.WithAgent(agent.Config{Name: "a0", Concurrency: 4}, testhooks.Agent{Provision: prov})
	startAgentOn(t, via(other, stay), ag, map[string]agent.HandlerFunc{"slow": sleepy(50 * time.Millisecond)})
	submitter, err := jfclient.New(via(stay, other), "", jfclient.WithFailover())
	require.NoError(t, err)
	submit(t, submitter, fmt.Sprintf(`{"id": %q, "items": %s, "agent_template": [{"handler": "slow"}]}`, id,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("i%d", i)} })))
	waitSucceeded(t, submitter, id, 40)

	// Clients on every node; the ones first on the cut-off node move off
	// it (WithFailover) but one, which knows no other server.
	var pollers []*statusPoller
	add := func(name string, failover bool, nodes ...int) {
		nc := via(nodes...)
		var opts []jfclient.Option
		if failover {
			opts = append(opts, jfclient.WithFailover())
		}
		cl, err := jfclient.New(nc, "", opts...)
		require.NoError(t, err)
		pollers = append(pollers, &statusPoller{name: name, cl: cl, nc: nc})
	}
	add("on-cut-only", false, cut)
	add("on-cut-failover", true, cut, stay, other)
	add("on-stay", true, stay, other, cut)
	add("on-other", false, other)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range pollers {
		wg.Go(func() { p.run(stop, id) })
	}
	stopPolling := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopPolling()

	before := status(t, submitter, id).Done()
	counts := func() []int {
		var cs []int
		for _, p := range pollers {
			cs = append(cs, p.count())
		}
		return cs
	}
	atCut := counts()
	c.Cut(cut)
	t.Logf("node %d (leading %s) cut off at %d done", cut, jobsStream, before)
	// Cut off until the job has moved on well past where it was and every
	// client has asked a few times since.
	fleettest.WaitFor(t, 90*time.Second, func() error {
		cs := counts()
		for i := range cs {
			if cs[i]-atCut[i] < 5 && pollers[i].name != "on-cut-only" {
				return fmt.Errorf("%s asked %d times since the cut", pollers[i].name, cs[i]-atCut[i])
			}
		}
		// Unanswered while no coordinator leads: the lease's stream may
		// have had its leader on the node cut off too (an election, then
		// a lease TTL).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := submitter.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.Done() < before+150 {
			return fmt.Errorf("done %d, want %d", st.Done(), before+150)
		}
		return nil
	})
	c.Heal(cut)
	healed := time.Now()
	st := waitJob(t, submitter, id, 3*time.Minute)
	require.EqualValues(t, n, st.Succeeded, "every item counted once: %+v", st)
	// Every client hears the end.
	fleettest.WaitFor(t, time.Minute, func() error {
		for _, p := range pollers {
			p.mu.Lock()
			ok := len(p.answers) > 0 && p.answers[len(p.answers)-1].terminal
			p.mu.Unlock()
			if !ok {
				return fmt.Errorf("%s has not seen the end", p.name)
			}
		}
		return nil
	})
	stopPolling()

	// Each client's answers, in order: never fewer done than the last.
	var all []statusAnswer
	for _, p := range pollers {
		last := statusAnswer{done: -1}
		for _, a := range p.answers {
			require.GreaterOrEqual(t, a.done, last.done,
				"client %s: done went back from %d (%s, source %s, as_of %s) to %d (%s, source %s, as_of %s, via %s) [heal at %s]",
				p.name, last.done, last.got.Format("15:04:05.000"), last.source, last.asOf.Format("15:04:05.000"),
				a.done, a.got.Format("15:04:05.000"), a.source, a.asOf.Format("15:04:05.000"), a.serverName, healed.Format("15:04:05.000"))
			last = a
		}
		t.Logf("%s: %d answers, %d errors", p.name, len(p.answers), p.errs)
		all = append(all, p.answers...)
	}
	// Across clients: an answer to a request sent after another answer came
	// back is at least as new. Answers by when they came back, requests by
	// when they were sent; the most done told so far is carried along.
	byGot := slices.SortedFunc(slices.Values(all), func(a, b statusAnswer) int { return a.got.Compare(b.got) })
	bySent := slices.SortedFunc(slices.Values(all), func(a, b statusAnswer) int { return a.sent.Compare(b.sent) })
	told, i := statusAnswer{done: -1}, 0
	for _, b := range bySent {
		for ; i < len(byGot) && byGot[i].got.Before(b.sent); i++ {
			if byGot[i].done > told.done {
				told = byGot[i]
			}
		}
		require.GreaterOrEqual(t, b.done, told.done,
			"%s was told %d done at %s (source %s); %s, asking at %s, was told %d (source %s, as_of %s, via %s) [heal at %s]",
			told.client, told.done, told.got.Format("15:04:05.000"), told.source, b.client, b.sent.Format("15:04:05.000"),
			b.done, b.source, b.asOf.Format("15:04:05.000"), b.serverName, healed.Format("15:04:05.000"))
	}
}
