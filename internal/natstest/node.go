package natstest

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// node is one nats-server process that can be stopped and started again on
// the same ports and store directory.
type node struct {
	t        testing.TB
	cfg      *config
	name     string
	storeDir string

	// Cluster membership; clusterName is empty for a single server.
	clusterName string
	clusterPort int
	routes      []*url.URL
	// noDirectRoutes: the node advertises a route address nobody listens
	// on, so that other nodes route to it only through the proxies of
	// WithPartitions, never directly.
	noDirectRoutes bool

	mu   sync.Mutex
	port int // client port, fixed after the first start
	srv  *server.Server
}

// start starts the node and waits until it accepts connections.
func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return fmt.Errorf("fleettest: node %s is already running", n.name)
	}
	o := baseOptions(n.name, n.storeDir)
	if n.clusterName != "" {
		o.Cluster = server.ClusterOpts{Name: n.clusterName, Host: "127.0.0.1", Port: n.clusterPort}
		o.Routes = n.routes
		if n.noDirectRoutes {
			o.Cluster.Advertise = "127.0.0.1:1"
		}
	}
	for _, fn := range n.cfg.configure {
		fn(o)
	}
	if n.port == 0 && o.Port == server.RANDOM_PORT {
		p, err := freePorts(1)
		if err != nil {
			return err
		}
		n.port = p[0]
	}
	if n.port != 0 {
		o.Port = n.port // a restart keeps the client port, so clients reconnect
	}
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("fleettest: node %s: %w", n.name, err)
	}
	if n.cfg.serverLogs {
		done := &atomic.Bool{}
		n.t.Cleanup(func() { done.Store(true) })
		s.SetLoggerV2(tLogger{t: n.t, prefix: "[" + n.name + "]", done: done}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(n.cfg.readyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("fleettest: node %s not ready for connections after %v (port in use?)", n.name, n.cfg.readyTimeout)
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("fleettest: node %s: no client listener", n.name)
	}
	n.port = addr.Port
	n.srv = s
	return nil
}

// stop shuts the node down and waits until it is gone. Stopping a stopped
// node does nothing.
func (n *node) stop() {
	n.mu.Lock()
	s := n.srv
	n.srv = nil
	n.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (n *node) server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

func (n *node) url() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", n.port)
}

// FreePort returns a free TCP port on 127.0.0.1 for a server a test starts
// itself (see freePorts).
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
