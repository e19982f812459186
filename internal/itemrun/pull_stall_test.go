package itemrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// stallLimit is how long the work consumer may sit with work outstanding
// (pending, or delivered and not acknowledged) and neither deliver nor
// have one acknowledged before the test calls it a stall. A message lost
// in the client waits AckWait (30s) for its redelivery.
const stallLimit = 10 * time.Second

// TestFreshFleetsNeverStall runs fresh fleets (an embedded server, a
// coordinator, two agents of 64 workers), several no-op jobs each, one
// after the other, and watches the work consumer: it must never sit with
// work outstanding while nothing is delivered or acknowledged. The agents'
// pulls once lost messages: nats.go's Fetch gave up a request on a
// heartbeat missed under load and unsubscribed its inbox while the server
// still delivered to it, and a whole batch sat unacknowledged until
// AckWait (the ~30s stalls of a fresh fleet's first jobs). STALL_FLEETS
// runs more fleets (scripts/bench-stall.sh is the same with processes).
func TestFreshFleetsNeverStall(t *testing.T) {
	checkLeaks(t)
	fleets, jobs, items := 2, 3, 4000
	if v, err := strconv.Atoi(os.Getenv("STALL_FLEETS")); err == nil && v > 0 {
		fleets = v
	}
	for f := range fleets {
		t.Run(fmt.Sprint("fleet-", f+1), func(t *testing.T) { runStallFleet(t, jobs, items) })
		if t.Failed() {
			return
		}
	}
}

func runStallFleet(t *testing.T, jobs, items int) {
	srv := fleettest.RunServer(t)
	ctx := testCtx(t, 120*time.Second)
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{})
	agCtx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	defer func() { stopAgents(); agents.Wait() }()
	for i := range 2 {
		a := New(srv.Connect(t), Config{Name: fmt.Sprint("stall-", i), Concurrency: 64, ShutdownTimeout: 5 * time.Second}).HandleBuiltins()
		agents.Add(1)
		go func() {
			defer agents.Done()
			if err := a.Run(agCtx); err != nil {
				t.Errorf("agent %s: %v", a.Name(), err)
			}
		}()
	}
	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	list := make([]map[string]any, items)
	for i := range list {
		list[i] = map[string]any{"id": fmt.Sprint("i", i)}
	}
	for j := range jobs {
		id := fmt.Sprint("job-", j+1)
		spec, err := json.Marshal(map[string]any{"id": id, "items": list, "agent_template": []map[string]any{{"handler": "noop"}}})
		require.NoError(t, err)
		jobCtx, jobDone := context.WithCancel(ctx)
		stalled := make(chan string, 1)
		go watchConsumer(jobCtx, srv.JS(), stalled)
		_, err = cl.JobSubmit(ctx, spec)
		require.NoError(t, err)
		waited := make(chan error, 1)
		go func() {
			st, err := cl.JobWait(jobCtx, id, 20*time.Millisecond, nil)
			if err == nil && st.State != messages.StateSucceeded {
				err = fmt.Errorf("job %s ended %s", id, st.State)
			}
			waited <- err
		}()
		select {
		case err := <-waited:
			jobDone()
			require.NoError(t, err)
		case what := <-stalled:
			jobDone()
			<-waited
			t.Fatalf("%s stalled: %s", id, what)
		}
	}
}

// watchConsumer reports on stalled, once, when the work consumer has had
// work outstanding and no delivery or acknowledgement for stallLimit.
func watchConsumer(ctx context.Context, js jetstream.JetStream, stalled chan<- string) {
	var (
		last  jetstream.ConsumerInfo
		since time.Time
	)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cons, err := js.Consumer(ctx, testNames.WorkStream(), testNames.AgentsConsumer(messages.DefaultPool))
		if err != nil {
			continue // not made yet
		}
		ci := cons.CachedInfo()
		now := time.Now()
		moved := ci.Delivered.Consumer != last.Delivered.Consumer || ci.AckFloor.Consumer != last.AckFloor.Consumer
		if moved || ci.NumPending+uint64(ci.NumAckPending) == 0 || since.IsZero() {
			last, since = *ci, now
			continue
		}
		if now.Sub(since) > stallLimit {
			stalled <- fmt.Sprintf("for %v: %d pending, %d delivered and not acknowledged, %d pull requests waiting, delivered %d, acknowledged up to %d",
				now.Sub(since).Round(time.Second), ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.Delivered.Consumer, ci.AckFloor.Consumer)
			return
		}
	}
}

// TestPullLosesNothingWhenTheConnectionFreezes freezes what the server
// sends an agent for longer than its pull request's heartbeats allow,
// mid-job, while the server goes on delivering: the agent gives the
// request up and pulls again, and the messages the server sent meanwhile
// still arrive and run. The job ends long before AckWait. (With a pull
// request's own inbox, unsubscribed when the request was given up, they
// were dropped and ran only after AckWait.)
func TestPullLosesNothingWhenTheConnectionFreezes(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	proxy := newFreezeProxy(t, srv.URL())
	ctx := testCtx(t, 60*time.Second)
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{})
	nc, err := nats.Connect(proxy.url(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	a := New(nc, Config{Name: "frozen", Concurrency: 8, ShutdownTimeout: 5 * time.Second}).HandleBuiltins()
	agCtx, stopAgent := context.WithCancel(ctx)
	agDone := make(chan error, 1)
	go func() { agDone <- a.Run(agCtx) }()
	defer func() { stopAgent(); require.NoError(t, <-agDone) }()

	const n = 3000
	list := make([]map[string]any, n)
	for i := range list {
		list[i] = map[string]any{"id": fmt.Sprint("i", i)}
	}
	spec, err := json.Marshal(map[string]any{"id": "frozen", "items": list, "agent_template": []map[string]any{{"handler": "noop"}}})
	require.NoError(t, err)
	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, spec)
	require.NoError(t, err)

	// Mid-job: some delivered, most still to come.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		cons, err := srv.JS().Consumer(ctx, testNames.WorkStream(), testNames.AgentsConsumer(messages.DefaultPool))
		if err != nil {
			return err
		}
		if d := cons.CachedInfo().Delivered.Consumer; d < 200 {
			return fmt.Errorf("%d delivered", d)
		}
		return nil
	})
	proxy.freeze()
	// Longer than the agent waits for a heartbeat or for the server to end
	// a request (pullRequest.lost): it gives the request up and pulls
	// again while the server's messages wait in the frozen connection. The
	// sleep is the freeze itself, not a wait for an outcome.
	time.Sleep(3 * time.Second)
	proxy.thaw()

	waitCtx, cancel := context.WithTimeout(ctx, stallLimit)
	defer cancel()
	st, err := cl.JobWait(waitCtx, "frozen", 20*time.Millisecond, nil)
	require.NoError(t, err, "the job did not end within %v of the thaw: messages were lost until AckWait", stallLimit)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
}

// freezeProxy forwards a client's connection to a server; freeze holds
// back what the server sends (the server's writes wait in the socket and
// the proxy) until thaw.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while not frozen
	conns  []net.Conn
	closed bool
	quit   chan struct{} // closed when the proxy closes
	wg     sync.WaitGroup
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{ln: ln, target: strings.TrimPrefix(target, "nats://"), open: make(chan struct{}), quit: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	p.open = make(chan struct{})
	p.mu.Unlock()
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	close(p.open)
	p.mu.Unlock()
}

func (p *freezeProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() {
			defer p.wg.Done()
			defer func() { _ = in.Close() }()
			buf := make([]byte, 32<<10)
			for {
				n, err := out.Read(buf)
				if n > 0 {
					select {
					case <-p.gate():
					case <-p.quit:
						return
					}
					if _, werr := in.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *freezeProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	close(p.quit)
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
