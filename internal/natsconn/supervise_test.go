package natsconn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

// closeFromServer makes the server close nc for good: a subject longer
// than its 4 KiB control line is a protocol error, after which nats.go
// does not reconnect.
func closeFromServer(t *testing.T, nc *nats.Conn) {
	t.Helper()
	require.NoError(t, nc.Publish(strings.Repeat("x", 5000), nil))
	_ = nc.Flush()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !nc.IsClosed() {
			return errors.New("still open")
		}
		return nil
	})
}

func TestSupervisorReplacesAConnectionTheServerClosed(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*nats.Conn
	sup := natsconn.Supervisor{Options: natsconn.Options{URL: srv.URL()}, RestartMin: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		done <- sup.Run(ctx, func(runCtx context.Context, nc *nats.Conn) error {
			conns = append(conns, nc)
			if len(conns) == 1 {
				closeFromServer(t, nc)
				select {
				case <-runCtx.Done(): // the supervisor stops the run whose connection is gone
				case <-time.After(10 * time.Second):
					return errors.New("run's context not cancelled after its connection closed")
				}
				return natsconn.Lost(nc)
			}
			require.True(t, nc.IsConnected())
			require.NoError(t, nc.Publish("a.b", nil), "the new connection works")
			cancel()
			<-runCtx.Done()
			return nil
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("supervisor did not return")
	}
	require.Len(t, conns, 2, "one run per connection")
	require.ErrorContains(t, conns[0].LastError(), "maximum control line exceeded")
	require.True(t, conns[1].IsClosed(), "drained when ctx ended")
}

// A run that fails while its connection is open (a configuration error) is
// reported once, not restarted.
func TestSupervisorReturnsAFailureOnAnOpenConnection(t *testing.T) {
	srv := natstest.RunServer(t)
	runs := 0
	boom := errors.New("boom")
	err := natsconn.Supervisor{Options: natsconn.Options{URL: srv.URL()}}.Run(context.Background(),
		func(context.Context, *nats.Conn) error { runs++; return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, runs)
}

func TestLostSaysWhy(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	closeFromServer(t, nc)
	err = natsconn.Lost(nc)
	require.ErrorIs(t, err, natsconn.ErrConnectionLost)
	require.ErrorIs(t, err, nats.ErrConnectionClosed)
	require.ErrorContains(t, err, "maximum control line exceeded")
}
