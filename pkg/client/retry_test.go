package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// answerStatus answers a status request for job j.
func answerStatus(m *nats.Msg) {
	data, _ := json.Marshal(messages.StatusReply{Status: &messages.JobStatus{ID: "j", State: messages.StateRunning}})
	_ = m.Respond(data)
}

// A coordinator that holds the queue subscription and answers nothing
// (paused) does not make status wait: the request is sent again to every
// coordinator, and one that serves answers.
func TestStatusAsksEveryCoordinatorWhenOneDoesNotAnswer(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	paused, live := srv.Connect(t), srv.Connect(t)
	_, err := paused.QueueSubscribe("fleet.api.jobs.status", "q", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, paused.Flush())
	_, err = live.Subscribe("fleet.api._all.jobs.status", answerStatus)
	require.NoError(t, err)
	require.NoError(t, live.Flush())
	cl, err := New(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := cl.JobStatus(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "j", st.ID)
}

// A coordinator of v0.3.0 that stops while it serves a status request
// answers "internal: context canceled" (later releases answer
// "unavailable"): the request is sent again, and a coordinator that serves
// answers, as in a rolling upgrade (docs/deploy.md, "Upgrades").
func TestStatusAsksAgainWhenAStoppingCoordinatorAnswersCanceled(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	stopping, live := srv.Connect(t), srv.Connect(t)
	var sub *nats.Subscription
	var answered atomic.Int32
	sub, err := stopping.QueueSubscribe("fleet.api.jobs.status", "q", func(m *nats.Msg) {
		answered.Add(1)
		_ = m.Respond([]byte(`{"error":{"code":"` + messages.CodeInternal + `","message":"context canceled"}}`))
		_ = sub.Unsubscribe() // it stopped
	})
	require.NoError(t, err)
	require.NoError(t, stopping.Flush())
	cl, err := New(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Alone, the stopping coordinator's answer is the only one.
	_, err = cl.JobStatus(ctx, "j")
	require.Error(t, err)
	require.EqualValues(t, 1, answered.Load())

	// Beside a live one, asked again: the live one answers.
	sub, err = stopping.QueueSubscribe("fleet.api.jobs.status", "q", func(m *nats.Msg) {
		answered.Add(1)
		_ = m.Respond([]byte(`{"error":{"code":"` + messages.CodeInternal + `","message":"context canceled"}}`))
		_ = sub.Unsubscribe()
	})
	require.NoError(t, err)
	require.NoError(t, stopping.Flush())
	_, err = live.QueueSubscribe("fleet.api.jobs.status", "q", answerStatus)
	require.NoError(t, err)
	_, err = live.Subscribe("fleet.api._all.jobs.status", answerStatus)
	require.NoError(t, err)
	require.NoError(t, live.Flush())
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	st, err := cl.JobStatus(ctx2, "j")
	require.NoError(t, err)
	require.Equal(t, "j", st.ID)
}

// An answer to an earlier attempt counts: a coordinator that answers the
// first attempt late (slow, not gone) is heard even though the request was
// sent again meanwhile.
func TestStatusTakesALateAnswerToAnEarlierAttempt(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	slow := srv.Connect(t)
	var mu sync.Mutex
	asked := 0
	_, err := slow.QueueSubscribe("fleet.api.jobs.status", "q", func(m *nats.Msg) {
		mu.Lock()
		asked++
		first := asked == 1
		mu.Unlock()
		if first {
			go func() {
				time.Sleep(ReadAttempt + 300*time.Millisecond) // a slow coordinator, by design
				answerStatus(m)
			}()
		}
	})
	require.NoError(t, err)
	// Later attempts go to every coordinator: none answers there.
	_, err = slow.Subscribe("fleet.api._all.jobs.status", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, slow.Flush())
	cl, err := New(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cl.JobStatus(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "j", st.ID)
}

// A submission is sent again while no coordinator can store it
// ("unavailable"), with the same id: one job. A spec with no id gets one
// from the client.
func TestSubmitSentAgainCarriesTheSameID(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	nc := srv.Connect(t)
	var mu sync.Mutex
	var ids []string
	_, err := nc.QueueSubscribe("fleet.api.jobs.submit", "q", func(m *nats.Msg) {
		var spec struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(m.Data, &spec)
		mu.Lock()
		ids = append(ids, spec.ID)
		n := len(ids)
		mu.Unlock()
		if n < 3 {
			data, _ := json.Marshal(messages.ErrorReply{Error: &messages.APIError{Code: messages.CodeUnavailable, Message: "storing the submission: nats: no response from stream"}})
			_ = m.Respond(data)
			return
		}
		data, _ := json.Marshal(messages.SubmitReply{JobID: spec.ID, State: messages.StatePending})
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	cl, err := New(srv.Connect(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.JobSubmit(ctx, []byte(` {"items": [{"id": "a"}], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	require.Len(t, ids, 3)
	require.True(t, strings.HasPrefix(ids[0], "job-"), ids[0])
	require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids)
	require.Equal(t, ids[0], r.JobID)
}

func TestWithJobID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"has an id", `{"id":"x","items":[]}`, `{"id":"x","items":[]}`},
		{"empty id", `{"id":"","items":[]}`, `{"id":"ID","items":[]}`},
		{"null id", `{"items":[],"id":null}`, `{"id":"ID","items":[]}`},
		{"no id", ` {"items":[]}`, `{"id":"ID","items":[]}`},
		{"empty object", `{ }`, `{"id":"ID" }`},
		{"not an object", `[1]`, `[1]`},
		{"not JSON", `id: x`, `id: x`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := withJobID([]byte(tc.in))
			require.NoError(t, err)
			var m map[string]any
			if json.Unmarshal(out, &m) == nil {
				if id, ok := m["id"].(string); ok && strings.HasPrefix(id, "job-") {
					out = []byte(strings.Replace(string(out), id, "ID", 1))
				}
			}
			require.Equal(t, tc.want, string(out))
		})
	}
}

// A client on a server cut off the cluster (its connection stays up; the
// coordinators are on the other nodes) moves to another server and gets
// its answer there (WithFailover).
func TestStatusMovesOffACutOffServer(t *testing.T) {
	t.Parallel()
	c := fleettest.RunCluster(t, 3, fleettest.WithPartitions(), fleettest.WithConfig(func(o *server.Options) {
		o.Cluster.PingInterval = 500 * time.Millisecond
		o.Cluster.MaxPingsOut = 3
	}))
	coord := c.ConnectNode(t, 0)
	_, err := coord.QueueSubscribe("fleet.api.jobs.status", "q", answerStatus)
	require.NoError(t, err)
	_, err = coord.Subscribe("fleet.api._all.jobs.status", answerStatus)
	require.NoError(t, err)
	require.NoError(t, coord.Flush())
	onCut := c.ConnectNode(t, 2)
	fleettest.WaitFor(t, 10*time.Second, func() error { // the subscriptions reached node 2
		_, err := onCut.Request("fleet.api.jobs.status", nil, time.Second)
		return err
	})
	urls := strings.Split(c.URLs(), ",")
	nc, err := nats.Connect(urls[2]+","+urls[0]+","+urls[1], nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	cl, err := New(nc, "", WithFailover())
	require.NoError(t, err)
	ctx0, cancel0 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel0()
	_, err = cl.JobStatus(ctx0, "j")
	require.NoError(t, err)
	require.Equal(t, c.NodeName(2), nc.ConnectedServerName())

	c.Cut(2)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.JobStatus(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "j", st.ID)
	require.NotEqual(t, c.NodeName(2), nc.ConnectedServerName())
	t.Logf("answered through %s %s after the cut", nc.ConnectedServerName(), time.Since(start).Round(10*time.Millisecond))
}

// A server whose routes to the coordinators' servers are not up (every
// node started again at once, or one cut off and healed) takes requests
// and finds no coordinator for a few seconds: Status keeps asking within
// its context (NoCoordinatorWait) instead of giving up, and is answered
// once the routes are back. The client knows only that server, so moving
// is no way out here.
func TestStatusWaitsForTheRoutesToForm(t *testing.T) {
	t.Parallel()
	c := fleettest.RunCluster(t, 3, fleettest.WithPartitions(), fleettest.WithConfig(func(o *server.Options) {
		o.Cluster.PingInterval = 500 * time.Millisecond
		o.Cluster.MaxPingsOut = 3
	}))
	coord := c.ConnectNode(t, 0)
	_, err := coord.QueueSubscribe("fleet.api.jobs.status", "q", answerStatus)
	require.NoError(t, err)
	_, err = coord.Subscribe("fleet.api._all.jobs.status", answerStatus)
	require.NoError(t, err)
	require.NoError(t, coord.Flush())
	nc := c.ConnectNode(t, 2, nats.IgnoreDiscoveredServers())
	fleettest.WaitFor(t, 10*time.Second, func() error { // the subscriptions reached node 2
		_, err := nc.Request("fleet.api.jobs.status", nil, time.Second)
		return err
	})
	require.Len(t, nc.Servers(), 1)

	// Node 2 off the cluster until its routes are given up: requests
	// through it find no one.
	c.Cut(2)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		_, err := nc.Request("fleet.api.jobs.status", nil, time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil
		}
		return fmt.Errorf("still routed: %v", err)
	})
	// Back on the network a second into the request: the routes form
	// again while it is being asked.
	healed := make(chan struct{})
	heal := time.AfterFunc(time.Second, func() { c.Heal(2); close(healed) })
	defer func() {
		if heal.Stop() {
			c.Heal(2)
		} else {
			<-healed
		}
	}()
	cl, err := New(nc, "", WithFailover())
	require.NoError(t, err)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.JobStatus(ctx, "j")
	require.NoError(t, err, "after %s", time.Since(start).Round(10*time.Millisecond))
	require.Equal(t, "j", st.ID)
	require.Equal(t, c.NodeName(2), nc.ConnectedServerName())
	t.Logf("answered %s after the request, the routes healed 1 s into it", time.Since(start).Round(10*time.Millisecond))
}

// A connection that is reconnecting holds its lock while it dials a server
// (nats.go), up to its Timeout: Status still returns by the end of its
// context, not once the dial gives up.
func TestStatusReturnsByItsDeadlineWhileTheConnectionDials(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	// A server that takes connections and never says a word (a node
	// being restarted, a silent network).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup
	conns := make(chan net.Conn, 16)
	held.Add(1)
	go func() {
		defer held.Done()
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			conns <- conn
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		held.Wait()
		close(conns)
		for conn := range conns {
			_ = conn.Close()
		}
	})
	const dial = 3 * time.Second
	nc, err := nats.Connect(srv.URL()+",nats://"+silent.Addr().String(), nats.DontRandomize(),
		nats.Timeout(dial), nats.ReconnectWait(time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	cl, err := New(nc, "")
	require.NoError(t, err)

	require.NoError(t, nc.ForceReconnect()) // to the silent one first
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = cl.JobStatus(ctx, "j")
	require.Error(t, err)
	require.Less(t, time.Since(start), dial/2, "returned once the dial gave up, not at its deadline: %v", err)
}

// A call sent once (a cancel, a list: every call but Status and Submit)
// that finds no coordinator serving is sent again until one serves, within
// NoCoordinatorWait: no responders means no one got it, so a change is not
// made twice. A coordinator that answers is asked once, whatever it says.
func TestCallWaitsForACoordinatorToServe(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	cl, err := New(srv.Conn(), "")
	require.NoError(t, err)

	var asked atomic.Int32
	serve := func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond([]byte(`{"status":{"id":"j","state":"cancelled"}}`))
	}
	coord := srv.Conn()
	var sub *nats.Subscription
	var subErr error
	// The coordinator starts serving 300 ms into the call (a takeover).
	started := make(chan struct{})
	late := time.AfterFunc(300*time.Millisecond, func() {
		defer close(started)
		sub, subErr = coord.QueueSubscribe("fleet.api.jobs.cancel", "q", serve)
	})
	defer func() {
		if late.Stop() {
			return
		}
		<-started
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	st, err := cl.JobCancel(ctx, "j")
	require.NoError(t, err, "after %s", time.Since(start).Round(10*time.Millisecond))
	require.Equal(t, messages.StateCancelled, st.State)
	require.EqualValues(t, 1, asked.Load(), "the coordinator got the cancel once")

	// An API error is an answer: not sent again.
	<-started
	require.NoError(t, subErr)
	require.NoError(t, sub.Unsubscribe())
	refuse, err := coord.QueueSubscribe("fleet.api.jobs.cancel", "q", func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond([]byte(`{"error":{"code":"not_found","message":"no job"}}`))
	})
	require.NoError(t, err)
	defer func() { _ = refuse.Unsubscribe() }()
	_, err = cl.JobCancel(ctx, "j")
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.EqualValues(t, 2, asked.Load())

	// "Unavailable" is an answer too: a change that reached a coordinator
	// is not sent again (Status would ask again; a cancel does not).
	require.NoError(t, refuse.Unsubscribe())
	busy, err := coord.QueueSubscribe("fleet.api.jobs.cancel", "q", func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond([]byte(`{"error":{"code":"` + messages.CodeUnavailable + `","message":"busy"}}`))
	})
	require.NoError(t, err)
	defer func() { _ = busy.Unsubscribe() }()
	_, err = cl.JobCancel(ctx, "j")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeUnavailable, ae.Code)
	require.EqualValues(t, 3, asked.Load())
}
