package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/lease"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// terms records the leadership terms of OnLeader components.
type terms struct {
	mu     sync.Mutex
	active map[string]bool
	both   bool // two components ran at once
	causes []error
}

func (tr *terms) component(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tr.mu.Lock()
		for other, on := range tr.active {
			if on && other != name {
				tr.both = true
			}
		}
		tr.active[name] = true
		tr.mu.Unlock()
		<-ctx.Done()
		tr.mu.Lock()
		tr.active[name] = false
		tr.causes = append(tr.causes, context.Cause(ctx))
		tr.mu.Unlock()
		return ctx.Err()
	}
}

func (tr *terms) running(name string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.active[name]
}

func startCoordWith(t *testing.T, srv *fleettest.Server, holder string, tr *terms) (*Coordinator, *running) {
	t.Helper()
	c, err := New(srv.Connect(t), Config{Provision: Provision(testProv), StatusInterval: 20 * time.Millisecond, Holder: holder, LeaseTTL: time.Second})
	require.NoError(t, err)
	c.OnLeader("probe", tr.component(holder))
	ctx, cancel := context.WithCancel(context.Background())
	p := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- c.Run(ctx) }()
	<-c.Ready()
	return c, p
}

// Two coordinators: one leads, and only there do OnLeader components
// run; the other answers the API (status, list, a durable cancel that
// the leader carries out); when the leader stops, the other takes over
// and its components run.
func TestFollowerAnswersAndTakesOver(t *testing.T) { // alone: its leases last 1 s
	srv := fleettest.RunServer(t)
	tr := &terms{active: map[string]bool{}}
	a, pa := startCoordWith(t, srv, "a", tr)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !a.IsLeader() || !tr.running("a") {
			return errors.New("a does not lead yet")
		}
		return nil
	})
	b, pb := startCoordWith(t, srv, "b", tr)
	defer pb.stop(t)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if b.Leader() != "a" {
			return errors.New("b has not seen the leader yet")
		}
		return nil
	})
	require.False(t, b.IsLeader())
	require.False(t, tr.running("b"))

	// A job whose items never finish (no agent): it stays running.
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cl.Submit(ctx, []byte(`{"id": "held", "items": [1, 2, 3], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	waitState(t, cl, "held", messages.StateRunning)

	// The follower answers from KV (the record, at most a status interval
	// old), and cancels through a durable request.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		st, err := b.Status(ctx, "held")
		if err == nil && st.State != messages.StateRunning {
			err = errors.New(st.State)
		}
		return err
	})
	require.Nil(t, b.runner("held"))
	// With kill: the request carries it, and the leader's map_ended event
	// tells the agents to kill.
	ended, err := srv.Conn().SubscribeSync(messages.MustNames("").EventSubject("held", messages.EventMapEnded))
	require.NoError(t, err)
	st, err := b.Cancel(ctx, "held", WithKill())
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State, "%+v", st)
	require.EqualValues(t, 3, st.NotRun)
	require.True(t, nextMapEnded(t, ended).Kill, "the map_ended event asks for a kill")
	_, err = b.Cancel(ctx, "held")
	require.ErrorIs(t, err, errJobFinished)
	// A kill of the cancelled job is sent again (its steps may still run).
	_, err = b.Cancel(ctx, "held", WithKill())
	require.NoError(t, err)
	require.True(t, nextMapEnded(t, ended).Kill)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if _, err := a.control.Get(ctx, wire.CancelKey("held")); err == nil {
			return errors.New("the cancel request is still there")
		}
		return nil
	})

	// The leader stops: the follower takes over at once (the lease is
	// released), and a's component ended with its term, not for a lost lease.
	pa.stop(t)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !b.IsLeader() || !tr.running("b") {
			return errors.New("b does not lead yet")
		}
		return nil
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.False(t, tr.both, "components of two coordinators ran at once")
	require.Len(t, tr.causes, 1)
	require.NotErrorIs(t, tr.causes[0], lease.ErrLost)
}

// The leader dies while expanding a durable submission (counting its
// items): the submission was not acknowledged, so it comes back to the
// next leader after the intake's AckWait, which accepts and runs the job
// once.
func TestLeaderDiesMidExpansion(t *testing.T) {
	old := intakeAckWait
	intakeAckWait = time.Second // the dead leader's delivery comes back quickly
	t.Cleanup(func() { intakeAckWait = old })
	srv := fleettest.RunServer(t)

	c1, err := New(srv.Connect(t), Config{Provision: Provision(testProv), Holder: "c1", LeaseTTL: time.Second})
	require.NoError(t, err)
	expanding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c1.beforeCount = func(string) { once.Do(func() { close(expanding) }); <-release }
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { _ = c1.Run(ctx1); close(done1) }()
	t.Cleanup(func() { close(release); <-done1 })
	<-c1.Ready()
	// c1 leads before c2 starts: the expansion to be cut is c1's.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !c1.IsLeader() {
			return errors.New("c1 does not lead yet")
		}
		return nil
	})
	tr := &terms{active: map[string]bool{}}
	c2, p2 := startCoordWith(t, srv, "c2", tr)
	defer p2.stop(t)
	ag := startEchoAgent(t, srv)
	defer ag.stop(t)

	_, err = srv.JS().Publish(context.Background(), "fleet.jobs.submit", []byte(`{"id": "mid", "items": [1, 2, 3, 4], "agent_template": [{"handler": "echo"}]}`))
	require.NoError(t, err)
	select {
	case <-expanding:
	case <-time.After(30 * time.Second):
		// Not a hang: c1 lost its 1 s lease (a loaded machine can delay
		// its renewals that long) and c2 expanded the job.
		t.Fatalf("c1 never expanded the submission (c1 leads: %v, c2 leads: %v)", c1.IsLeader(), c2.IsLeader())
	}
	require.True(t, c1.IsLeader())
	c1.nc.Close() // as dead as a killed process, to the server
	cancel1()

	// Ask once c2 leads: a request sent right after the close could still
	// be routed to c1's subscription and wait out the client's timeout.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !c2.IsLeader() {
			return errors.New("c2 does not lead yet")
		}
		return nil
	})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	st := waitState(t, cl, "mid", messages.StateSucceeded)
	require.EqualValues(t, 4, st.Succeeded, "%+v", st)
	require.EqualValues(t, 4, st.Published, "%+v", st)
}

// nextMapEnded is the next map_ended event on sub.
func nextMapEnded(t *testing.T, sub *nats.Subscription) messages.MapPhaseEndedEvent {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var ev messages.Event
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	var data messages.MapPhaseEndedEvent
	require.NoError(t, json.Unmarshal(ev.Data, &data))
	return data
}
