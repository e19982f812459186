package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// hubDomain is the JetStream domain of the hub in the leaf-node tests.
const hubDomain = "hub"

// siteRuns records which agent ran which item.
type siteRuns struct {
	mu  sync.Mutex
	by  map[string]map[string]int // item -> agent -> siteRuns
	all int
}

func newSiteRuns() *siteRuns { return &siteRuns{by: map[string]map[string]int{}} }

func (r *siteRuns) handler(agentName string) agent.HandlerFunc {
	return func(ctx context.Context, c *agent.Call) (any, error) {
		r.mu.Lock()
		if r.by[c.ItemID] == nil {
			r.by[c.ItemID] = map[string]int{}
		}
		r.by[c.ItemID][agentName]++
		r.all++
		r.mu.Unlock()
		n, _ := strconv.Atoi(c.ItemID)
		if n%10 == 9 {
			return nil, retry.Permanent(errors.New("item " + c.ItemID + " is bad"))
		}
		return "ok", nil
	}
}

func (r *siteRuns) agents() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, by := range r.by {
		for a, n := range by {
			out[a] += n
		}
	}
	return out
}

// leafKinds are the two kinds of leaf server agents sit behind: one that
// runs no JetStream, and one that runs JetStream in a domain of its own
// (its local streams are not the fleet's: the agents still name the hub's
// domain).
var leafKinds = []struct {
	name string
	opts []fleettest.Option
}{
	{"leaf without JetStream", nil},
	{"leaf with its own JetStream domain", []fleettest.Option{fleettest.WithConfig(func(o *server.Options) {
		o.JetStream, o.JetStreamDomain = true, "site-b"
	})}},
}

// A coordinator on the hub (JetStream domain "hub") and agents of pool
// site-b connected only to a leaf server: the agents reach the hub's
// streams through their JetStream domain setting, run the pool's items
// (and only they do), report results and dead letters, keep a long step's
// item with heartbeats, write their presence, and obey pause, resume and
// cancel --kill.
func TestAgentsBehindALeafNode(t *testing.T) {
	t.Parallel() // its own server or cluster; no rate or fault timing
	for _, kind := range leafKinds {
		t.Run(kind.name, func(t *testing.T) {
			port := fleettest.FreePort(t)
			hub := fleettest.RunServer(t, fleettest.WithLeafHub(port, hubDomain))
			leaf := fleettest.RunLeaf(t, fmt.Sprintf("127.0.0.1:%d", port), kind.opts...)
			startCoordinator(t, hub.URL(), coordinator.Config{Pools: []string{"site-b"}})
			r := newSiteRuns()
			started := make(chan string, 16)
			killed := make(chan error, 16)
			gate := make(chan struct{})
			handlers := func(name string) map[string]agent.HandlerFunc {
				return map[string]agent.HandlerFunc{
					"rec": r.handler(name),
					// block runs until the gate opens or its job is killed.
					"block": func(ctx context.Context, c *agent.Call) (any, error) {
						started <- c.JobID
						select {
						case <-ctx.Done():
							killed <- context.Cause(ctx)
							return nil, ctx.Err()
						case <-gate:
							return "ok", nil
						}
					},
				}
			}
			startAgent(t, hub.URL(), agent.Config{Name: "hub-1"}, handlers("hub-1"))
			reg := prometheus.NewRegistry()
			for _, name := range []string{"b1", "b2"} {
				cfg := agent.Config{Name: name, Pool: "site-b", JSDomain: hubDomain, PresenceInterval: 100 * time.Millisecond, Heartbeat: 300 * time.Millisecond}
				if name == "b1" {
					cfg.Registerer = reg
				}
				startAgent(t, leaf.URL(), cfg, handlers(name))
			}
			cl := client(t, hub)
			ctx := context.Background()

			// The pool's items run behind the leaf only; results and dead
			// letters reach the hub.
			id := submit(t, cl, `{"id": "edge", "pool": "site-b", "items": `+itemsJSON(100, func(i int) map[string]any { return map[string]any{"id": strconv.Itoa(i)} })+`,
				"agent_template": [{"handler": "rec"}]}`)
			st := waitJob(t, cl, id, 60*time.Second)
			require.EqualValues(t, 90, st.Succeeded, "%+v", st)
			require.EqualValues(t, 10, st.DeadLettered, "%+v", st)
			ran := r.agents()
			require.Zero(t, ran["hub-1"], "the hub's agent of another pool ran none: %v", ran)
			require.Equal(t, 100, ran["b1"]+ran["b2"], "each item ran once, behind the leaf: %v", ran)
			require.Len(t, readDLQ(t, hub, id), 10)

			// Presence: the hub's agents bucket holds the site's agents.
			kv, err := hub.JS().KeyValue(ctx, messages.MustNames("").AgentsBucket())
			require.NoError(t, err)
			for _, name := range []string{"b1", "b2"} {
				e, err := kv.Get(ctx, wire.AgentKey("site-b", name))
				require.NoError(t, err, name)
				var p messages.AgentPresence
				require.NoError(t, json.Unmarshal(e.Value(), &p))
				require.Equal(t, "site-b", p.Pool)
			}

			// Heartbeats: steps that outlast AckWait (2 s) are not
			// redelivered while they run; pause holds what is queued.
			id = submit(t, cl, `{"id": "long", "pool": "site-b", "items": [{"id": "x"}, {"id": "y"}], "agent_template": [{"handler": "block"}, {"handler": "rec"}]}`)
			for range 2 {
				require.Equal(t, id, <-started)
			}
			_, err = cl.PoolPause(ctx, "site-b")
			require.NoError(t, err)
			<-time.After(3 * time.Second) // past AckWait: a heartbeat-less item would be redelivered
			close(gate)                   // the steps end; their items wait for the resume
			<-time.After(time.Second)
			r.mu.Lock()
			require.Zero(t, r.by["x"]["b1"]+r.by["x"]["b2"]+r.by["y"]["b1"]+r.by["y"]["b2"], "the second step waits for the resume")
			r.mu.Unlock()
			require.Empty(t, started, "no step ran twice")
			_, err = cl.PoolResume(ctx, "site-b")
			require.NoError(t, err)
			st = waitJob(t, cl, id, 30*time.Second)
			require.EqualValues(t, 2, st.Succeeded, "%+v", st)
			require.Empty(t, started, "no step ran twice")

			// cancel --kill reaches running steps behind the leaf.
			gate = make(chan struct{})
			id = submit(t, cl, `{"id": "kill", "pool": "site-b", "items": [{"id": "k1"}, {"id": "k2"}], "agent_template": [{"handler": "block"}]}`)
			for range 2 {
				require.Equal(t, id, <-started)
			}
			_, err = cl.JobCancel(ctx, id, jfclient.WithKill())
			require.NoError(t, err)
			for range 2 {
				select {
				case cause := <-killed:
					require.ErrorIs(t, cause, agent.ErrJobKilled)
				case <-time.After(10 * time.Second):
					t.Fatal("a step behind the leaf still runs 10 s after cancel --kill")
				}
			}
			st = waitJob(t, cl, id, 10*time.Second)
			require.EqualValues(t, 2, st.NotRun, "%+v", st)
			close(gate)
		})
	}
}

// syncBuffer is a log sink safe for concurrent use.
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

// An agent behind a leaf node without the hub's domain (or with a wrong
// one) finds no JetStream: it says what to check, naming the domain
// setting, and keeps trying instead of exiting.
func TestAgentBehindALeafWithoutTheDomainWaits(t *testing.T) {
	port := fleettest.FreePort(t)
	hub := fleettest.RunServer(t, fleettest.WithLeafHub(port, hubDomain))
	leaf := fleettest.RunLeaf(t, fmt.Sprintf("127.0.0.1:%d", port))
	startCoordinator(t, hub.URL(), coordinator.Config{Pools: []string{"site-b"}})
	for _, domain := range []string{"", "elsewhere"} {
		t.Run("domain "+strconv.Quote(domain), func(t *testing.T) {
			var logs syncBuffer
			cfg := agent.Config{Name: "b1", Pool: "site-b", JSDomain: domain, Logger: zerolog.New(&logs)}
			a := agent.New(leaf.Connect(t), cfg)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			fleettest.WaitFor(t, 20*time.Second, func() error {
				if !strings.Contains(logs.String(), "--js-domain") {
					return errors.New("no warning yet")
				}
				return nil
			})
			require.Contains(t, logs.String(), "FLEET_JS_DOMAIN")
			require.Contains(t, logs.String(), "no responders")
			select {
			case err := <-done:
				t.Fatalf("the agent exited: %v", err)
			default:
			}
			require.Equal(t, 1, strings.Count(logs.String(), `"level":"warn"`), "one warning, not one per try:\n%s", logs.String())
			cancel()
			require.NoError(t, <-done)
		})
	}
}

// warnings counts the warning lines in logs.
func warnings(logs string) int { return strings.Count(logs, `"level":"warn"`) }

// When the leaf's link drops mid-job, the agents behind it finish the
// steps they run (and those they had buffered) and keep their results; they log one line for the cut,
// not one per try; the hub goes on with another pool's job and status
// names the unreachable agents, with when they were last heard of. When
// the link returns after AckWait, the held results are stored and the
// redelivered copies of their items run again: the job ends with each
// item counted once.
func TestLeafLinkComesAndGoes(t *testing.T) {
	port := fleettest.FreePort(t)
	hub := fleettest.RunServer(t, fleettest.WithLeafHub(port, hubDomain))
	leaf := fleettest.RunLeaf(t, fmt.Sprintf("127.0.0.1:%d", port))
	startCoordinator(t, hub.URL(), coordinator.Config{Pools: []string{"site-b"}})
	r := newSiteRuns()
	startAgent(t, hub.URL(), agent.Config{Name: "hub-1"}, map[string]agent.HandlerFunc{"rec": r.handler("hub-1")})
	const concurrency, items = 4, 40
	started := make(chan string, items*2)
	gate := make(chan struct{})
	logs := map[string]*syncBuffer{}
	for _, name := range []string{"b1", "b2"} {
		logs[name] = &syncBuffer{}
		rec := r.handler(name)
		startAgentLogged(t, leaf.URL(), agent.Config{Name: name, Pool: "site-b", JSDomain: hubDomain, Concurrency: concurrency, Prefetch: concurrency,
			PresenceInterval: 100 * time.Millisecond}, zerolog.New(logs[name]).Level(zerolog.InfoLevel),
			map[string]agent.HandlerFunc{"gated": func(ctx context.Context, c *agent.Call) (any, error) {
				started <- c.ItemID
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return rec(ctx, c)
			}})
	}
	cl := client(t, hub)
	ctx := context.Background()
	id := submit(t, cl, `{"id": "cut", "pool": "site-b", "items": `+itemsJSON(items, func(i int) map[string]any { return map[string]any{"id": strconv.Itoa(i*10 + 3)} })+`,
		"agent_template": [{"handler": "gated"}]}`)
	running := map[string]bool{}
	for len(running) < 2*concurrency {
		running[<-started] = true
	}

	// The link drops while 8 steps run.
	leaf.Cut()
	leaf.WaitUnlinked(t)
	cutAt := time.Now()

	// The hub goes on: another pool's job runs to the end, and status
	// answers, naming the agents it no longer hears from.
	other := submit(t, cl, `{"id": "hubside", "items": `+itemsJSON(20, func(i int) map[string]any { return map[string]any{"id": strconv.Itoa(i*10 + 1)} })+`, "agent_template": [{"handler": "rec"}]}`)
	st := waitJob(t, cl, other, 30*time.Second)
	require.EqualValues(t, 20, st.Succeeded)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		st, err := cl.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if len(st.Unreachable) != 2 {
			return fmt.Errorf("unreachable agents %+v", st.Unreachable)
		}
		return nil
	})
	st, err := cl.JobStatus(ctx, id)
	require.NoError(t, err)
	for _, a := range st.Unreachable {
		require.Contains(t, []string{"b1", "b2"}, a.Name)
		require.WithinDuration(t, cutAt, a.Since, 2*time.Second, "since its last presence before the cut")
	}
	require.Zero(t, st.Done(), "%+v", st)

	// The running steps finish behind the cut link; their results wait.
	close(gate)
	<-time.After(3 * time.Second) // past AckWait (2 s): the hub gives the 8 items up
	// Only what the agents had buffered before the cut (Prefetch each)
	// started during it: no pull reached the hub.
	require.LessOrEqual(t, len(started), 2*concurrency, "items started while the link was down")
	st, err = cl.JobStatus(ctx, id)
	require.NoError(t, err)
	require.Zero(t, st.Done(), "no result crossed the cut link: %+v", st)
	for name, l := range logs {
		require.LessOrEqual(t, warnings(l.String()), 2, "%s logs a line for the cut (and one for its presence), not one per try:\n%s", name, l.String())
	}

	// The link returns: the held results are stored, the redelivered
	// copies run again, each item is counted once.
	leaf.Heal()
	leaf.WaitLinked(t)
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, items, st.Succeeded, "%+v", st)
	require.Zero(t, st.DeadLettered+st.Failed, "%+v", st)
	r.mu.Lock()
	runs := 0
	for _, by := range r.by {
		runs += by["b1"] + by["b2"]
	}
	r.mu.Unlock()
	t.Logf("%d runs of %d items; b1's log:\n%s", runs, items, logs["b1"].String())
	require.GreaterOrEqual(t, runs, items)
	require.LessOrEqual(t, runs, items+4*concurrency, "only the items running or buffered at the cut ran twice")
	for name, l := range logs {
		require.Contains(t, l.String(), "answers again", name)
	}
	// The hub hears from them again.
	kv, err := hub.JS().KeyValue(ctx, messages.MustNames("").AgentsBucket())
	require.NoError(t, err)
	healed := time.Now()
	fleettest.WaitFor(t, 10*time.Second, func() error {
		for _, name := range []string{"b1", "b2"} {
			e, err := kv.Get(ctx, wire.AgentKey("site-b", name))
			if err != nil {
				return err
			}
			if !e.Created().After(healed) {
				return fmt.Errorf("%s not heard from since %s", name, e.Created())
			}
		}
		return nil
	})
}
