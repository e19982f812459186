package natstest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded single-node JetStream server with a client
// connection. URL, Conn, JS, NATSServer and StoreDir are safe for concurrent
// use; Restart and Shutdown are meant for the test's goroutine.
type Server struct {
	cfg  config
	node *node
	nc   *nats.Conn
	js   jetstream.JetStream
}

// RunServer starts an embedded nats-server with JetStream on a random
// localhost port, storing files in a fresh directory (WithStoreDir, else
// one on a memory file system when the machine has one: newStoreDir), waits
// until it is ready and returns it with a connected client. The server and
// every connection it handed out are closed when the test ends.
func RunServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := newConfig(opts)
	dir := cfg.storeDir
	if dir == "" {
		dir = newStoreDir(t)
	}
	s := &Server{cfg: cfg}
	s.node = &node{t: t, cfg: &s.cfg, name: "fleettest", storeDir: dir}
	if err := s.node.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	s.nc = s.Connect(t)
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	s.js = js
	s.waitJetStream(t)
	return s
}

// URL is the server's client URL, e.g. "nats://127.0.0.1:41234". It stays
// the same across Restart.
func (s *Server) URL() string { return s.node.url() }

// Conn is the connection made by RunServer. It reconnects after Restart.
func (s *Server) Conn() *nats.Conn { return s.nc }

// JS is a JetStream context on Conn.
func (s *Server) JS() jetstream.JetStream { return s.js }

// NATSServer is the running nats-server, nil while shut down.
func (s *Server) NATSServer() *server.Server { return s.node.server() }

// StoreDir is the JetStream store directory.
func (s *Server) StoreDir() string { return s.node.storeDir }

// Connect opens another connection to the server, closed when t ends. It
// reconnects forever (every 50ms), so it survives Restart.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return connect(t, s.URL(), s.cfg.connectOptions("fleettest"), opts)
}

// Restart shuts the server down and starts it again on the same port and
// store directory, then waits until the default connection has reconnected
// and JetStream answers. File-stored streams and buckets survive.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.node.stop()
	if err := s.node.start(); err != nil {
		t.Fatal(err)
	}
	s.waitJetStream(t)
}

// Shutdown stops the server and waits until it is gone. Connections stay
// open and keep trying to reconnect until the test ends. Safe to call twice.
func (s *Server) Shutdown() { s.node.stop() }

func (s *Server) waitJetStream(t testing.TB) {
	t.Helper()
	WaitFor(t, s.cfg.readyTimeout, func() error {
		if !s.nc.IsConnected() {
			return fmt.Errorf("client not connected (%v)", s.nc.Status())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.js.AccountInfo(ctx)
		return err
	})
}

// connect dials urls with base options then extra ones, and closes the
// connection at the end of t.
func connect(t testing.TB, urls string, base, extra []nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, append(base, extra...)...)
	if err != nil {
		t.Fatalf("fleettest: connect %s: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// nodeDir is the store directory of a cluster node under root.
func nodeDir(root, name string) string { return filepath.Join(root, name) }
