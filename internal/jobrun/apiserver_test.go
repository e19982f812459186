package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// startCoordConfig starts a coordinator with cfg (plus the tests'
// provisioning) after prep has set what tests may set before Run.
func startCoordConfig(t *testing.T, srv *fleettest.Server, cfg Config, prep func(*Coordinator)) *running {
	t.Helper()
	cfg.Provision, cfg.StatusInterval = Provision(testProv), 20*time.Millisecond
	c, err := New(srv.Connect(t), cfg)
	require.NoError(t, err)
	if prep != nil {
		prep(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-p.done:
		t.Fatalf("coordinator exited: %v", err)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// checkLeaks checks, when the test ends, that it left no goroutine behind.
func checkLeaks(t *testing.T) {
	fleettest.VerifyNoLeaks(t)
}

// blocking is an endpoint that answers only when its request's context
// ends, as a KV read through a server that lost the cluster does.
func blocking(ctx context.Context, _ []byte) (any, *messages.APIError) {
	<-ctx.Done()
	return nil, apiErr(messages.CodeInternal, ctx.Err().Error())
}

// Requests run off the subscription's goroutine with a deadline: slow
// requests are answered "unavailable" at their deadline, not one after the
// other, and a status request sent behind them is answered at once; over
// APIConcurrency in flight, a request is refused at once. (A coordinator
// that answered requests one at a time with no deadline held every
// request behind one that waited.)
func TestAPIRequestsRunConcurrentlyWithADeadline(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	const deadline = 1500 * time.Millisecond
	const slow = 4
	var inFlight atomic.Int64
	startCoordConfig(t, srv, Config{APIWriteDeadline: deadline, APIConcurrency: slow + 1}, func(c *Coordinator) {
		c.testEndpoints = map[string]endpointFunc{"test.block": func(ctx context.Context, data []byte) (any, *messages.APIError) {
			inFlight.Add(1)
			return blocking(ctx, data)
		}}
		// Health checks are another test's: on a loaded run, checks that
		// time out make the coordinator leave its server (natsconn.CutOff),
		// and requests sent meanwhile find no responder.
		c.probe = func(context.Context) error { return nil }
	})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	waitInFlight := func(n int64) {
		fleettest.WaitFor(t, 10*time.Second, func() error {
			if inFlight.Load() < n {
				return errors.New("requests not in flight yet")
			}
			return nil
		})
	}

	start := time.Now()
	errs := make(chan error, slow+1)
	block := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errs <- cl.Call(ctx, "test.block", nil, nil)
	}
	for range slow {
		go block()
	}
	waitInFlight(slow)
	// Behind them, a status request: the one free slot answers it.
	t0 := time.Now()
	_, err = cl.Status(context.Background(), "nope")
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeNotFound, ae.Code)
	require.Less(t, time.Since(t0), deadline, "a status request waited behind slow ones")
	// Every slot taken: one more request is refused at once.
	go block()
	waitInFlight(slow + 1)
	t0 = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cl.Call(ctx, "test.block", nil, nil)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeUnavailable, ae.Code)
	require.Less(t, time.Since(t0), deadline, "a request over the limit waited")
	for range slow + 1 {
		err := <-errs
		require.ErrorAs(t, err, &ae)
		require.Equal(t, messages.CodeUnavailable, ae.Code, "%v", err)
	}
	require.Less(t, time.Since(start), 2*deadline+2*time.Second, "slow requests were answered one after the other")
}

// A coordinator that cannot reach the cluster stops serving the API, so
// that every request goes to one that can; it serves again once it
// reaches the cluster.
func TestCoordinatorCutOffStopsServing(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	var cutOff atomic.Bool
	who := func(name string) map[string]endpointFunc {
		return map[string]endpointFunc{"test.who": func(context.Context, []byte) (any, *messages.APIError) { return name, nil }}
	}
	health := Config{HealthInterval: 20 * time.Millisecond, HealthFailures: 2}
	cfgA, cfgB := health, health
	cfgA.Holder, cfgB.Holder = "a", "b"
	startCoordConfig(t, srv, cfgA, func(c *Coordinator) {
		c.testEndpoints = who("a")
		c.probe = func(context.Context) error {
			if cutOff.Load() {
				return errors.New("no responders")
			}
			return nil
		}
	})
	startCoordConfig(t, srv, cfgB, func(c *Coordinator) { c.testEndpoints = who("b") })
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	answers := func(n int) map[string]int {
		seen := map[string]int{}
		for range n {
			var name string
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := cl.Call(ctx, "test.who", nil, &name)
			cancel()
			if err == nil {
				seen[name]++
			}
		}
		return seen
	}
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if s := answers(40); s["a"] == 0 || s["b"] == 0 {
			return fmt.Errorf("both serve: %v", s)
		}
		return nil
	})
	cutOff.Store(true)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if s := answers(40); s["a"] > 0 || s["b"] != 40 {
			return fmt.Errorf("only b answers: %v", s)
		}
		return nil
	})
	cutOff.Store(false)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if s := answers(40); s["a"] == 0 {
			return fmt.Errorf("a serves again: %v", s)
		}
		return nil
	})
}

// When no other coordinator serves (every one fails its checks, as in a
// JetStream meta election), one that cannot reach the cluster serves on:
// an answer, even "unavailable", is better than none.
func TestCoordinatorServesOnWhenNoOtherServes(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	var checks atomic.Int64
	cfg := Config{HealthInterval: 20 * time.Millisecond, HealthFailures: 2, Holder: "a"}
	startCoordConfig(t, srv, cfg, func(c *Coordinator) {
		c.testEndpoints = map[string]endpointFunc{"test.who": func(context.Context, []byte) (any, *messages.APIError) { return "a", nil }}
		c.probe = func(context.Context) error {
			checks.Add(1)
			return errors.New("no responders")
		}
	})
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if checks.Load() < 6 {
			return errors.New("not checked enough yet")
		}
		return nil
	})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	var name string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, cl.Call(ctx, "test.who", nil, &name))
	require.Equal(t, "a", name)
}

// Two coordinators that both fail their checks (a JetStream meta election
// fails everyone's) both serve on: neither stops for the other.
func TestCoordinatorsFailingTogetherServeOn(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	var checks atomic.Int64
	for _, name := range []string{"a", "b"} {
		cfg := Config{HealthInterval: 20 * time.Millisecond, HealthFailures: 2, Holder: name}
		startCoordConfig(t, srv, cfg, func(c *Coordinator) {
			c.testEndpoints = map[string]endpointFunc{"test.who": func(context.Context, []byte) (any, *messages.APIError) { return name, nil }}
			c.probe = func(context.Context) error {
				checks.Add(1)
				return errors.New("JetStream system temporarily unavailable")
			}
		})
	}
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if checks.Load() < 12 {
			return errors.New("not checked enough yet")
		}
		return nil
	})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	seen := map[string]int{}
	for range 40 {
		var name string
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, cl.Call(ctx, "test.who", nil, &name))
		cancel()
		seen[name]++
	}
	require.Positive(t, seen["a"], "%v", seen)
	require.Positive(t, seen["b"], "%v", seen)
}

// Status says where it came from and how fresh it is: the leader answers
// from the job's runner, a follower from the record (read from the
// stream's leader), both with as_of.
func TestStatusSaysHowFreshItIs(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	tr := &terms{active: map[string]bool{}}
	c1, p1 := startCoordWith(t, srv, "c1", tr)
	defer p1.stop(t)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !c1.IsLeader() {
			return errors.New("c1 not leading yet")
		}
		return nil
	})
	c2, p2 := startCoordWith(t, srv, "c2", tr)
	defer p2.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cl.Submit(ctx, []byte(`{"id":"fresh","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`))
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if r := c1.runner("fresh"); r == nil || !r.replayed() {
			return errors.New("no runner that has caught up yet") // until then status comes from the record
		}
		return nil
	})
	before := time.Now()
	st, err := c1.Status(ctx, "fresh")
	require.NoError(t, err)
	require.Equal(t, messages.StatusFromRunner, st.Source)
	require.NotNil(t, st.AsOf)
	// As of now by the server's time, which the coordinator learns from
	// the stamps of messages: behind this machine's clock by at most the
	// lag of the freshest message it received.
	require.WithinDuration(t, before, *st.AsOf, time.Second, "the runner's counts are as of now")
	fleettest.WaitFor(t, 10*time.Second, func() error {
		st, err := c2.Status(ctx, "fresh")
		if err != nil {
			return err
		}
		if st.Source != messages.StatusFromRecord || st.AsOf == nil {
			return fmt.Errorf("follower's record: source %q as_of %v", st.Source, st.AsOf)
		}
		return nil
	})
	// Through the API, the follower forwards to the leader: the live
	// counts, whichever coordinator the request reaches.
	for range 10 {
		reply, e := c2.apiEndpoints().All()[messages.EndpointJobsStatus](ctx, []byte(`{"job_id":"fresh"}`))
		require.Nil(t, e)
		require.Equal(t, messages.StatusFromRunner, reply.(messages.StatusReply).Status.Source)
		st, err := cl.Status(ctx, "fresh")
		require.NoError(t, err)
		require.Equal(t, messages.StatusFromRunner, st.Source)
	}
}

// Client.Wait never shows counts older than ones it showed: a status with
// an earlier as_of (a coordinator answering from an older record) is
// skipped.
func TestWaitNeverGoesBack(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { t := base.Add(time.Duration(s) * time.Second); return &t }
	replies := []messages.JobStatus{
		{ID: "j", State: messages.StateRunning, Items: 10, Succeeded: 5, AsOf: at(2)},
		{ID: "j", State: messages.StateRunning, Items: 10, Succeeded: 3, AsOf: at(1)}, // stale
		{ID: "j", State: messages.StateRunning, Items: 10, Succeeded: 7, AsOf: at(3)},
		{ID: "j", State: messages.StateSucceeded, Items: 10, Succeeded: 10, AsOf: at(4)},
	}
	var mu sync.Mutex
	n := 0
	sub, err := srv.Conn().Subscribe("fleet.api.jobs.status", func(m *nats.Msg) {
		mu.Lock()
		st := replies[min(n, len(replies)-1)]
		n++
		mu.Unlock()
		data, _ := json.Marshal(messages.StatusReply{Status: &st})
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	cl, err := NewClient(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []int64
	st, err := cl.Wait(ctx, "j", time.Millisecond, func(s *messages.JobStatus) { seen = append(seen, s.Succeeded) })
	require.NoError(t, err)
	require.EqualValues(t, 10, st.Succeeded)
	require.Equal(t, []int64{5, 5, 7, 10}, seen)
}

// A status request that a coordinator does not answer (paused: it holds
// its subscription and answers nothing) is sent again after ReadAttempt
// and answered by another coordinator, well within a 3 s probe.
func TestStatusAsksAgainWhenACoordinatorDoesNotAnswer(t *testing.T) {
	srv := fleettest.RunServer(t)
	nc := srv.Connect(t)
	const subject = "fleet.api.jobs.status"
	got := make(chan struct{}, 1)
	paused, err := nc.QueueSubscribe(subject, "q", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	live := srv.Connect(t)
	go func() {
		<-got
		// The paused one has the request; another coordinator serves now.
		_, err := live.QueueSubscribe(subject, "q", func(m *nats.Msg) {
			data, _ := json.Marshal(messages.StatusReply{Status: &messages.JobStatus{ID: "j", State: messages.StateRunning}})
			_ = m.Respond(data)
		})
		if err == nil {
			_ = live.Flush()
		}
		_ = paused.Unsubscribe()
		_ = nc.Flush()
	}()
	cl, err := NewClient(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	st, err := cl.Status(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "j", st.ID)
	require.Less(t, time.Since(start), 3*time.Second)
}

// With no coordinator serving, a request says so after NoCoordinatorWait
// (not at the end of its 30 s default), or at the end of a shorter
// context, and the error is also a no-responders one, which
// natsconn.ClusterLoss counts.
func TestNoCoordinatorIsNoResponders(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	start := time.Now()
	_, err = cl.Status(context.Background(), "j")
	require.ErrorIs(t, err, ErrNoCoordinator)
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.GreaterOrEqual(t, time.Since(start), NoCoordinatorWait)
	require.Less(t, time.Since(start), NoCoordinatorWait+5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = cl.Status(ctx, "j")
	require.ErrorIs(t, err, ErrNoCoordinator, "the last answer, not the deadline")
}

// A runner that has not replayed the job's results to the end (a new
// leader's, just started) has counted only part of them: status comes
// from the record until it has caught up.
func TestStatusOfAReplayingRunnerComesFromTheRecord(t *testing.T) {
	t.Parallel()
	recData, err := json.Marshal(wire.JobRecord{Status: messages.JobStatus{ID: "j", State: messages.StateRunning, Items: 10, Succeeded: 7}})
	require.NoError(t, err)
	c := &Coordinator{cfg: Config{}.WithDefaults(), runners: map[string]*jobRunner{},
		store: &jobStore{leader: func(context.Context, string) ([]byte, uint64, error) { return recData, 3, nil }}}
	r := &jobRunner{c: c}
	r.rec.Status = messages.JobStatus{ID: "j", State: messages.StateRunning, Items: 10, Succeeded: 2}
	c.runners["j"] = r
	st, err := c.Status(context.Background(), "j")
	require.NoError(t, err)
	require.Equal(t, messages.StatusFromRecord, st.Source)
	require.EqualValues(t, 7, st.Succeeded)
}

// A coordinator on a single server (one URL) whose health checks time out
// (a loaded node) stays on its server: reconnecting to the same server
// would only drop the API requests in flight. A request made before the
// checks failed is answered after they did.
func TestSingleServerCoordinatorStaysOnItsServer(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	var checks atomic.Int64
	// Checks, past the cut-off detector's run (each failed check after
	// the second also asks the other coordinators, for api.OthersWait).
	const enough = 6
	failed := make(chan struct{}) // closed at the enough-th failed check
	var coord *Coordinator
	startCoordConfig(t, srv, Config{HealthInterval: 20 * time.Millisecond, HealthFailures: 2, Holder: "a"}, func(c *Coordinator) {
		coord = c
		c.cutOff.Failures, c.cutOff.Span = 2, 40*time.Millisecond
		c.probe = func(context.Context) error {
			if checks.Add(1) == enough {
				close(failed)
			}
			return context.DeadlineExceeded
		}
		c.testEndpoints = map[string]endpointFunc{"test.slow": func(ctx context.Context, _ []byte) (any, *messages.APIError) {
			select {
			case <-ctx.Done():
				return nil, apiErr(messages.CodeUnavailable, "the checks did not fail")
			case <-failed:
				return "done", nil
			}
		}}
	})
	require.Len(t, coord.nc.Servers(), 1)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got string
	require.NoError(t, cl.Call(ctx, "test.slow", nil, &got))
	require.Equal(t, "done", got)
	require.GreaterOrEqual(t, checks.Load(), int64(enough))
	require.Zero(t, coord.nc.Stats().Reconnects)
}
