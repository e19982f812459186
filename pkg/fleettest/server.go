package fleettest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// The servers' helpers are internal/natstest's, which the in-package tests
// of pkg/agent and pkg/coordinator import (RunFleet imports those
// packages). Server, Cluster and Option wrap them, so that this package's
// documentation names no internal type; TestConstantsAreNatstests keeps the
// constants equal.

// ClusterName is the name of the cluster RunCluster starts.
const ClusterName = "fleettest"

// DefaultReadyTimeout bounds how long RunServer and RunCluster wait for a
// server (or a cluster's meta leader) to be ready.
const DefaultReadyTimeout = 30 * time.Second

// PollInterval is how often WaitFor re-checks its condition.
const PollInterval = 20 * time.Millisecond

// Option configures RunServer and RunCluster.
type Option struct{ o natstest.Option }

func natsOptions(opts []Option) []natstest.Option {
	out := make([]natstest.Option, 0, len(opts))
	for _, o := range opts {
		if o.o != nil {
			out = append(out, o.o)
		}
	}
	return out
}

// WithAccount names the account whose streams the cluster's leader helpers
// look at. Defaults to the global account ("$G").
func WithAccount(name string) Option { return Option{natstest.WithAccount(name)} }

// WithStoreDir keeps JetStream files in dir instead of a fresh directory. For a
// cluster, node i uses dir/<node name>.
func WithStoreDir(dir string) Option { return Option{natstest.WithStoreDir(dir)} }

// WithConfig changes the server options before each start (including
// restarts), e.g. to add users and permissions for auth tests; for a
// cluster it applies to every node.
func WithConfig(fn func(*server.Options)) Option { return Option{natstest.WithConfig(fn)} }

// WithConnectOptions adds options to every client connection handed out.
func WithConnectOptions(opts ...nats.Option) Option {
	return Option{natstest.WithConnectOptions(opts...)}
}

// WithReadyTimeout replaces DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option { return Option{natstest.WithReadyTimeout(d)} }

// WithServerLogs sends the server's notices, warnings and errors to t.Log.
func WithServerLogs() Option { return Option{natstest.WithServerLogs()} }

// WithPartitions routes a cluster's traffic between nodes through proxies
// that Cluster.Cut and Cluster.Heal take a node off the cluster network
// with, and put it back: a cut-off node keeps its clients while its
// routes go silent. Set the servers' Cluster.PingInterval (WithConfig) to
// say how soon a silent route is given up.
func WithPartitions() Option { return Option{natstest.WithPartitions()} }

// Server is an embedded single-node JetStream server with a client
// connection. URL, Conn, JS, NATSServer and StoreDir are safe for
// concurrent use; Restart and Shutdown are meant for the test's goroutine.
type Server struct{ s *natstest.Server }

// RunServer starts an embedded nats-server with JetStream on a random
// localhost port, storing files in a fresh directory (or WithStoreDir), waits
// until it is ready and returns it with a connected client. The server and
// every connection it handed out are closed when the test ends.
func RunServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return &Server{natstest.RunServer(t, natsOptions(opts)...)}
}

// URL is the server's client URL, e.g. "nats://127.0.0.1:41234". It stays
// the same across Restart.
func (s *Server) URL() string { return s.s.URL() }

// Conn is the connection made by RunServer. It reconnects after Restart.
func (s *Server) Conn() *nats.Conn { return s.s.Conn() }

// JS is a JetStream context on Conn.
func (s *Server) JS() jetstream.JetStream { return s.s.JS() }

// Connect opens another connection to the server, closed when t ends. It
// reconnects forever (every 50ms), so it survives Restart.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return s.s.Connect(t, opts...)
}

// NATSServer is the running nats-server, nil while shut down.
func (s *Server) NATSServer() *server.Server { return s.s.NATSServer() }

// StoreDir is the JetStream store directory.
func (s *Server) StoreDir() string { return s.s.StoreDir() }

// Restart shuts the server down and starts it again on the same port and
// store directory, then waits until the default connection has reconnected
// and JetStream answers. File-stored streams and buckets survive.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.s.Restart(t)
}

// Shutdown stops the server and waits until it is gone. Connections stay
// open and keep trying to reconnect until the test ends. Safe to call
// twice.
func (s *Server) Shutdown() { s.s.Shutdown() }

// Cluster is an in-process JetStream cluster with a client connection to
// all its nodes, which are numbered from 0. URLs, Conn, JS, Servers,
// Server, MetaLeader and StreamLeader are safe for concurrent use; the
// other methods are meant for the test's goroutine.
type Cluster struct{ c *natstest.Cluster }

// RunCluster starts an n-node cluster (n ≥ 2; 3 for R3 streams) with
// JetStream on random localhost ports with one store directory per node,
// waits for its meta leader and for every node to be known to it, and
// returns it with a client connected to all nodes. Everything stops when
// the test ends.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return &Cluster{natstest.RunCluster(t, n, natsOptions(opts)...)}
}

// URLs are the client URLs of all nodes, comma-joined as nats.Connect
// takes them. They stay the same across RestartNode.
func (c *Cluster) URLs() string { return c.c.URLs() }

// Conn is the connection made by RunCluster; it fails over between nodes.
func (c *Cluster) Conn() *nats.Conn { return c.c.Conn() }

// JS is a JetStream context on Conn.
func (c *Cluster) JS() jetstream.JetStream { return c.c.JS() }

// Connect opens another connection to the cluster, closed when t ends.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return c.c.Connect(t, opts...)
}

// ConnectNode opens a connection to node i only (no failover), closed when
// t ends: to observe what a client of that node sees.
func (c *Cluster) ConnectNode(t testing.TB, i int, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return c.c.ConnectNode(t, i, opts...)
}

// Servers are the nodes' servers in order; a stopped node's entry is nil.
func (c *Cluster) Servers() []*server.Server { return c.c.Servers() }

// Server is node i's server, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server { return c.c.Server(i) }

// NodeName is node i's server name ("n0", "n1", ...), as it appears in
// stream and consumer cluster info.
func (c *Cluster) NodeName(i int) string { return c.c.NodeName(i) }

// StopNode shuts node i down and waits until it is gone. Stopping the
// leader of a replicated stream leaves the stream leaderless for a Raft
// election (4–9 s by default); use StepDownStreamLeader first to avoid it.
func (c *Cluster) StopNode(i int) { c.c.StopNode(i) }

// RestartNode starts node i again with its ports and store directory and
// waits until it has rejoined the meta group.
func (c *Cluster) RestartNode(t testing.TB, i int) {
	t.Helper()
	c.c.RestartNode(t, i)
}

// Cut takes node i off the cluster network: its routes to and from every
// other node go silent. Its clients stay connected to it. Needs
// WithPartitions.
func (c *Cluster) Cut(i int) { c.c.Cut(i) }

// Heal puts node i back on the cluster network: the connections that were
// open across the cut are closed and the servers route again.
func (c *Cluster) Heal(i int) { c.c.Heal(i) }

// MetaLeader is the index of the node leading the JetStream meta group, or
// -1 if there is none.
func (c *Cluster) MetaLeader() int { return c.c.MetaLeader() }

// WaitForMetaLeader waits until the cluster has a meta leader that sees
// every running node, and returns the leader's index.
func (c *Cluster) WaitForMetaLeader(t testing.TB) int {
	t.Helper()
	return c.c.WaitForMetaLeader(t)
}

// StreamLeader is the index of the node leading stream, or -1 while the
// stream has no leader. It asks the nodes themselves (their Raft state in
// the account of WithAccount), which is current at once; stream info
// answered through the API may lag a leader change by seconds.
func (c *Cluster) StreamLeader(stream string) int { return c.c.StreamLeader(stream) }

// WaitForStreamLeader waits until stream has a leader and every running
// node's replica is current, and returns the leader's index.
func (c *Cluster) WaitForStreamLeader(t testing.TB, stream string) int {
	t.Helper()
	return c.c.WaitForStreamLeader(t, stream)
}

// StepDownStreamLeader asks stream's leader to step down and waits,
// bounded by ctx, until another node leads it; it returns the new leader's
// index.
func (c *Cluster) StepDownStreamLeader(ctx context.Context, stream string) (int, error) {
	return c.c.StepDownStreamLeader(ctx, stream)
}

// FreePort returns a TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return natstest.FreePort(t)
}

// WaitFor calls cond every PollInterval until it returns nil, and fails the
// test with cond's last error if that does not happen within timeout. Call
// it from the test's goroutine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	natstest.WaitFor(t, timeout, cond)
}

// IgnoreServerGoroutines is the goleak option for what an embedded server
// leaves behind after Shutdown on purpose: a stream with a source keeps a
// goroutine that waits up to 30 s to set up its source consumer, and it
// ends on its own.
func IgnoreServerGoroutines() goleak.Option { return natstest.IgnoreServerGoroutines() }
