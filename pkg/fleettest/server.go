package fleettest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// Server is an embedded single-node JetStream server with a client
// connection: URL, Conn, JS, Connect, NATSServer, StoreDir, Restart and
// Shutdown. URL, Conn, JS, NATSServer and StoreDir are safe for concurrent
// use; Restart and Shutdown are meant for the test's goroutine.
type Server = natstest.Server

// Cluster is an in-process cluster of JetStream servers: URLs, Conn, JS,
// Connect, ConnectNode, Servers, StopNode, RestartNode and the leader
// helpers (MetaLeader, StreamLeader, StepDownStreamLeader, …). Its methods
// are meant for the test's goroutine.
type Cluster = natstest.Cluster

// Option configures RunServer and RunCluster.
type Option = natstest.Option

// ClusterName is the name of the cluster RunCluster starts.
const ClusterName = natstest.ClusterName

// DefaultReadyTimeout bounds how long RunServer and RunCluster wait for a
// server (or a cluster's meta leader) to be ready.
const DefaultReadyTimeout = natstest.DefaultReadyTimeout

// PollInterval is how often WaitFor re-checks its condition.
const PollInterval = natstest.PollInterval

// RunServer starts an embedded nats-server with JetStream on a random
// localhost port, storing files in t.TempDir() (or WithStoreDir), waits
// until it is ready and returns it with a connected client. The server and
// every connection it handed out are closed when the test ends.
func RunServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return natstest.RunServer(t, opts...)
}

// RunCluster starts an n-node cluster (n ≥ 2) with JetStream, waits for
// its meta leader and for every node to be known to it, and returns it
// with a client connected to all nodes. Everything stops when the test
// ends.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return natstest.RunCluster(t, n, opts...)
}

// WithAccount names the account whose streams the cluster's leader helpers
// look at. Defaults to the global account ("$G").
func WithAccount(name string) Option { return natstest.WithAccount(name) }

// WithStoreDir keeps JetStream files in dir instead of t.TempDir(). For a
// cluster, node i uses dir/<node name>.
func WithStoreDir(dir string) Option { return natstest.WithStoreDir(dir) }

// WithConfig changes the server options before each start (including
// restarts), e.g. to add users and permissions for auth tests; for a
// cluster it applies to every node.
func WithConfig(fn func(*server.Options)) Option { return natstest.WithConfig(fn) }

// WithConnectOptions adds options to every client connection handed out.
func WithConnectOptions(opts ...nats.Option) Option { return natstest.WithConnectOptions(opts...) }

// WithReadyTimeout replaces DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option { return natstest.WithReadyTimeout(d) }

// WithServerLogs sends the server's notices, warnings and errors to t.Log.
func WithServerLogs() Option { return natstest.WithServerLogs() }

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

// WithPartitions routes a cluster's traffic between nodes through proxies
// that Cluster.Cut and Cluster.Heal take a node off the cluster network
// with, and put it back: a cut-off node keeps its clients while its
// routes go silent. Set the servers' Cluster.PingInterval (WithConfig) to
// say how soon a silent route is given up.
func WithPartitions() Option { return natstest.WithPartitions() }
