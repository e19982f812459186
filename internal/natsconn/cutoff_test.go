package natsconn

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

func TestClusterLoss(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("storing the submission: %w", jetstream.ErrNoStreamResponse), true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10039, Description: "JetStream system temporarily unavailable"}, true},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrKeyExists, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, ClusterLoss(tc.err), "%v", tc.err)
	}
}

// The detector, on a hand-moved clock: it asks for a reconnect after
// Failures cluster-loss errors in a row spanning Span, not before; a
// success or an unrelated error ends the run; after a reconnect it waits
// Quiet before asking again.
func TestCutOffObserve(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := &CutOff{Failures: 3, Span: 2 * time.Second, Quiet: 30 * time.Second, Now: func() time.Time { return now }}
	step := func(d time.Duration, err error) bool {
		now = now.Add(d)
		return c.Observe(err)
	}
	lost := nats.ErrNoResponders

	require.False(t, step(0, lost))
	require.False(t, step(time.Second, lost))
	require.False(t, step(500*time.Millisecond, lost), "3 failures but over 1.5 s only")
	require.True(t, step(500*time.Millisecond, lost), "4 failures over 2 s")

	// Quiet: the new server gets time to answer.
	for range 10 {
		require.False(t, step(time.Second, lost))
	}
	now = now.Add(20 * time.Second) // 30 s since the reconnect
	require.True(t, step(0, lost), "still failing after Quiet")

	// A success ends the run.
	now = now.Add(time.Minute)
	require.False(t, step(0, lost))
	require.False(t, step(time.Second, lost))
	require.False(t, step(0, nil))
	require.False(t, step(time.Second, lost))
	require.False(t, step(time.Second, lost))
	require.True(t, step(time.Second, lost))

	// So does an error that says nothing of the cluster.
	now = now.Add(time.Minute)
	require.False(t, step(0, lost))
	require.False(t, step(time.Second, lost))
	require.False(t, step(0, jetstream.ErrKeyNotFound))
	require.False(t, step(time.Second, lost))
}

// Zero fields take the defaults.
func TestCutOffDefaults(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := &CutOff{Now: func() time.Time { return now }}
	fired := 0
	for range DefaultCutOffFailures {
		if c.Observe(nats.ErrTimeout) {
			fired++
		}
		now = now.Add(DefaultCutOffSpan)
	}
	require.Equal(t, 1, fired)
}

// A connection that knows one server has nowhere to move: calls that keep
// failing (a loaded single node whose calls time out) never reconnect it,
// which would only drop what is in flight. One that knows the cluster's
// other nodes moves.
func TestCutOffMovesOnlyWhereItCan(t *testing.T) {
	natstest.VerifyNoLeaks(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fail := func(c *CutOff, nc *nats.Conn) (moved int) {
		for range 10 {
			if c.ObserveConn(nc, context.DeadlineExceeded) {
				moved++
			}
			now = now.Add(time.Second)
		}
		return moved
	}

	srv := natstest.RunServer(t)
	single := srv.Connect(t)
	require.Len(t, single.Servers(), 1)
	require.Zero(t, fail(&CutOff{Failures: 2, Span: time.Second, Quiet: time.Second, Now: clock}, single))
	require.NoError(t, single.Flush())
	require.Zero(t, single.Stats().Reconnects)

	cl := natstest.RunCluster(t, 3)
	nc := cl.Connect(t)
	require.Greater(t, len(nc.Servers()), 1)
	require.Positive(t, fail(&CutOff{Failures: 2, Span: time.Second, Quiet: time.Minute, Now: clock}, nc))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if nc.Stats().Reconnects == 0 {
			return errors.New("not reconnected yet")
		}
		return nil
	})
}

// Only the server the connection is on counts: a run of failures starts
// again once the connection has reconnected (the failures were another
// server's), and failures while it has no server at all (every node down)
// do not count, so a connection that has just found a server after a
// whole cluster restarted is not moved off it while JetStream elects its
// leaders.
func TestCutOffCountsOnlyTheServerItIsOn(t *testing.T) {
	natstest.VerifyNoLeaks(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reconnected := func(nc *nats.Conn, n uint64) func() error {
		return func() error {
			if nc.Stats().Reconnects < n || !nc.IsConnected() {
				return fmt.Errorf("reconnects %d, connected %v", nc.Stats().Reconnects, nc.IsConnected())
			}
			return nil
		}
	}

	t.Run("a reconnect starts the run again", func(t *testing.T) {
		cl := natstest.RunCluster(t, 3)
		nc := cl.Connect(t)
		require.Greater(t, len(nc.Servers()), 1)
		c := &CutOff{Failures: 2, Span: time.Second, Quiet: time.Minute, Now: clock}
		require.False(t, c.ObserveConn(nc, context.DeadlineExceeded))
		require.NoError(t, nc.ForceReconnect())
		natstest.WaitFor(t, 10*time.Second, reconnected(nc, 1))
		now = now.Add(time.Second)
		require.False(t, c.ObserveConn(nc, context.DeadlineExceeded), "two failures over 1 s, but on two servers")
		now = now.Add(time.Second)
		require.True(t, c.ObserveConn(nc, context.DeadlineExceeded), "two failures over 1 s on this one")
		natstest.WaitFor(t, 10*time.Second, reconnected(nc, 2))
	})

	t.Run("no server, no count", func(t *testing.T) {
		srv := natstest.RunServer(t)
		// A second URL where nothing listens: the connection knows
		// somewhere to move to.
		nc, err := nats.Connect(srv.URL()+",nats://127.0.0.1:1", nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		require.Len(t, nc.Servers(), 2)
		srv.Shutdown()
		natstest.WaitFor(t, 10*time.Second, func() error {
			if nc.IsConnected() {
				return errors.New("still connected")
			}
			return nil
		})
		c := &CutOff{Failures: 2, Span: time.Second, Quiet: time.Minute, Now: clock}
		for range 5 {
			require.False(t, c.ObserveConn(nc, context.DeadlineExceeded))
			now = now.Add(time.Second)
		}
	})
}
