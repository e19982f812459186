package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterName is the name of the clusters RunCluster starts.
const ClusterName = "fleettest"

// Cluster is an in-process JetStream cluster with a client connection to
// all its nodes. Read-only methods (URLs, Conn, JS, Servers, Server,
// MetaLeader, StreamLeader) are safe for concurrent use; StopNode,
// RestartNode and the Wait helpers are meant for the test's goroutine.
type Cluster struct {
	cfg     config
	nodes   []*node
	nc      *nats.Conn
	js      jetstream.JetStream
	proxies []*routeProxy // WithPartitions
}

// RunCluster starts an n-node JetStream cluster (n ≥ 2; 3 for R3 streams)
// on random localhost ports with one store directory per node, waits until
// it has a meta leader that sees every node, and connects a client to all
// nodes. Everything is shut down when the test ends.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 2 {
		t.Fatalf("fleettest: a cluster needs at least 2 nodes, got %d", n)
	}
	c := &Cluster{cfg: newConfig(opts)}
	root := c.cfg.storeDir
	if root == "" {
		root = newStoreDir(t)
	}
	t.Cleanup(c.shutdown)
	if c.cfg.partitions {
		// Proxy (i, j) carries node i's routes to node j.
		for i := range n {
			for j := range n {
				if i == j {
					continue
				}
				p, err := newRouteProxy(i, j)
				if err != nil {
					t.Fatal(err)
				}
				c.proxies = append(c.proxies, p)
			}
		}
	}
	ports, err := freePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	routeURLs := server.RoutesFromStr(strings.Join(routes, ","))
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		nd := &node{
			t: t, cfg: &c.cfg, name: name, storeDir: nodeDir(root, name),
			clusterName: ClusterName, clusterPort: ports[i], routes: routeURLs,
		}
		if c.cfg.partitions {
			// Node i routes to node j through proxy (i, j) only.
			var via []string
			for _, p := range c.proxies {
				if p.from == i {
					p.start(fmt.Sprintf("127.0.0.1:%d", ports[p.to]))
					via = append(via, "nats-route://"+p.addr())
				}
			}
			nd.routes = server.RoutesFromStr(strings.Join(via, ","))
			nd.noDirectRoutes = true
		}
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := nd.start(); err != nil {
			t.Fatal(err)
		}
	}
	c.waitMeta(t)
	c.nc = c.Connect(t)
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	WaitFor(t, c.cfg.readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.js.AccountInfo(ctx)
		return err
	})
	return c
}

// URLs are the client URLs of all nodes, comma-joined as nats.Connect takes
// them. They stay the same across RestartNode.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = nd.url()
	}
	return strings.Join(urls, ",")
}

// Conn is the connection made by RunCluster; it fails over between nodes.
func (c *Cluster) Conn() *nats.Conn { return c.nc }

// JS is a JetStream context on Conn.
func (c *Cluster) JS() jetstream.JetStream { return c.js }

// Connect opens another connection to the cluster, closed when t ends.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return connect(t, c.URLs(), c.cfg.connectOptions("fleettest-cluster"), opts)
}

// ConnectNode opens a connection to node i only (no failover), closed when
// t ends: to observe what a client of that node sees.
func (c *Cluster) ConnectNode(t testing.TB, i int, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return connect(t, c.nodes[i].url(), c.cfg.connectOptions("fleettest-"+c.nodes[i].name), opts)
}

// Servers are the nodes' servers in order; a stopped node's entry is nil.
func (c *Cluster) Servers() []*server.Server {
	out := make([]*server.Server, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.server()
	}
	return out
}

// Server is node i's server, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server { return c.nodes[i].server() }

// NodeName is node i's server name ("n0", "n1", ...), as it appears in
// stream and consumer cluster info.
func (c *Cluster) NodeName(i int) string { return c.nodes[i].name }

// StopNode shuts node i down and waits until it is gone. Stopping the
// leader of a replicated stream leaves the stream leaderless for a Raft
// election (4–9 s by default); use StepDownStreamLeader first to avoid it.
func (c *Cluster) StopNode(i int) { c.nodes[i].stop() }

// RestartNode starts node i again with its ports and store directory and
// waits until it has rejoined the meta group.
func (c *Cluster) RestartNode(t testing.TB, i int) {
	t.Helper()
	if err := c.nodes[i].start(); err != nil {
		t.Fatal(err)
	}
	c.waitMeta(t)
}

// MetaLeader is the index of the node leading the JetStream meta group, or
// -1 if there is none.
func (c *Cluster) MetaLeader() int {
	for i, s := range c.Servers() {
		if s != nil && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// WaitForMetaLeader waits until the cluster has a meta leader that sees
// every running node, and returns the leader's index.
func (c *Cluster) WaitForMetaLeader(t testing.TB) int {
	t.Helper()
	c.waitMeta(t)
	return c.MetaLeader()
}

func (c *Cluster) waitMeta(t testing.TB) {
	t.Helper()
	WaitFor(t, c.cfg.readyTimeout, func() error {
		running := 0
		for _, s := range c.Servers() {
			if s == nil {
				continue
			}
			running++
			if !s.JetStreamIsCurrent() {
				return fmt.Errorf("node %s is not current with the meta group", s.Name())
			}
		}
		l := c.MetaLeader()
		if l < 0 {
			return errors.New("no meta leader")
		}
		if peers := c.Server(l).JetStreamClusterPeers(); len(peers) < running {
			return fmt.Errorf("meta leader sees %d of %d running nodes: %v", len(peers), running, peers)
		}
		return nil
	})
}

// StreamLeader is the index of the node leading stream, or -1 while the
// stream has no leader. It asks the nodes themselves (their Raft state in
// the account of WithAccount), which is current at once; stream info
// answered through the API may lag a leader change by seconds.
func (c *Cluster) StreamLeader(stream string) int {
	leader := -1
	for i, s := range c.Servers() {
		if s == nil {
			continue
		}
		acc, err := s.LookupAccount(c.cfg.accountName())
		if err != nil || !acc.JetStreamIsStreamLeader(stream) {
			continue
		}
		if leader >= 0 {
			return -1 // two nodes think they lead: the change is not settled
		}
		leader = i
	}
	return leader
}

// WaitForStreamLeader waits until stream has a leader and every running
// node's replica is current, and returns the leader's index.
func (c *Cluster) WaitForStreamLeader(t testing.TB, stream string) int {
	t.Helper()
	leader := -1
	WaitFor(t, c.cfg.readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := s.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader", stream)
		}
		for _, r := range info.Cluster.Replicas {
			i := c.nodeIndex(r.Name)
			if i >= 0 && c.Server(i) != nil && (!r.Current || r.Offline) {
				return fmt.Errorf("stream %s: replica %s is not current", stream, r.Name)
			}
		}
		if leader = c.StreamLeader(stream); leader < 0 {
			return fmt.Errorf("stream %s: no node leads it yet", stream)
		}
		return nil
	})
	return leader
}

// StepDownStreamLeader asks stream's leader to step down (through the
// $JS.API.STREAM.LEADER.STEPDOWN.<stream> API) and waits, bounded by ctx,
// until another node leads it; it returns the new leader's index. A request
// that gets no answer (the leader may be mid-change) or a leadership that
// comes back to the same node is retried.
func (c *Cluster) StepDownStreamLeader(ctx context.Context, stream string) (int, error) {
	var last error
	for ctx.Err() == nil {
		l, err := c.stepDownOnce(ctx, stream)
		if err == nil {
			return l, nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(PollInterval):
		}
	}
	return -1, fmt.Errorf("fleettest: step down %s: %w (last error: %v)", stream, ctx.Err(), last)
}

// stepDownAttempt bounds one step-down request and the wait for its effect.
const stepDownAttempt = 3 * time.Second

func (c *Cluster) stepDownOnce(ctx context.Context, stream string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, stepDownAttempt)
	defer cancel()
	old := c.StreamLeader(stream)
	if old < 0 {
		return -1, fmt.Errorf("stream %s has no leader", stream)
	}
	msg, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		return -1, err
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return -1, err
	}
	if resp.Error != nil {
		return -1, resp.Error
	}
	for {
		if l := c.StreamLeader(stream); l >= 0 && l != old {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("leadership did not move from %s: %w", c.NodeName(old), ctx.Err())
		case <-time.After(PollInterval):
		}
	}
}

func (c *Cluster) nodeIndex(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

func (c *Cluster) shutdown() {
	for _, nd := range c.nodes {
		nd.stop()
	}
	for _, p := range c.proxies {
		p.close()
	}
}
