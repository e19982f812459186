package natstest

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// LeafPingInterval is how often a leaf node started by RunLeaf pings its
// hub (and its clients); with LeafMaxPingsOut unanswered pings it gives up
// a silent link, so a Cut is noticed within about a second. A hub meant
// for leaves should use the same (WithLeafHub does).
const (
	LeafPingInterval = 250 * time.Millisecond
	LeafMaxPingsOut  = 3
)

// WithLeafHub makes a server (or every node of a cluster) a hub for leaf
// nodes: it accepts their links on 127.0.0.1:port (FreePort gives one)
// and, when domain is not empty, runs its JetStream in that domain
// (`jetstream { domain: … }`), which clients behind a leaf node name to
// reach it.
func WithLeafHub(port int, domain string) Option {
	return WithConfig(func(o *server.Options) {
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", port
		// Leaves learn the hub's leaf-node URLs from it and try them when
		// they link again: advertise one nobody listens on, so that a
		// leaf's link stays on its proxy (RunLeaf) and a Cut holds.
		o.LeafNode.Advertise = "127.0.0.1:1"
		o.JetStreamDomain = domain
		o.PingInterval, o.MaxPingsOut = LeafPingInterval, LeafMaxPingsOut
	})
}

// Leaf is an embedded leaf-node server whose link to its hub goes through
// a proxy the test can cut (Cut) and restore (Heal), as a site's network
// link is: the leaf's clients stay connected to it, the link goes silent
// (nothing delivered, no reset) until the leaf's pings give up on it, and
// the leaf links again once it is healed. URL and Connect are safe for
// concurrent use; Cut, Heal and Shutdown are meant for the test's
// goroutine.
type Leaf struct {
	cfg   config
	node  *node
	proxy *routeProxy
}

// RunLeaf starts a leaf node linked to the hub's leaf-node port at hubAddr
// (host:port): by default without JetStream, in the global account;
// WithConfig changes the options (a JetStream domain of its own, users,
// the remote's credentials and local account: o.LeafNode.Remotes[0]). It
// waits until the link is up. The leaf is shut down when t ends.
func RunLeaf(t testing.TB, hubAddr string, opts ...Option) *Leaf {
	t.Helper()
	proxy, err := newRouteProxy(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	proxy.start(hubAddr)
	link, err := url.Parse("nats-leaf://" + proxy.addr())
	if err != nil {
		t.Fatal(err)
	}
	cfg := newConfig(opts)
	cfg.configure = append([]func(*server.Options){func(o *server.Options) {
		o.JetStream = false
		o.PingInterval, o.MaxPingsOut = LeafPingInterval, LeafMaxPingsOut
		o.LeafNode.ReconnectInterval = 100 * time.Millisecond
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{link}}}
	}}, cfg.configure...)
	l := &Leaf{cfg: cfg, proxy: proxy}
	l.node = &node{t: t, cfg: &l.cfg, name: "leaf", storeDir: newStoreDir(t)}
	if err := l.node.start(); err != nil {
		proxy.close()
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	l.WaitLinked(t)
	return l
}

// URL is the leaf's client URL.
func (l *Leaf) URL() string { return l.node.url() }

// NATSServer is the running leaf server.
func (l *Leaf) NATSServer() *server.Server { return l.node.server() }

// Connect opens a connection to the leaf, closed when t ends.
func (l *Leaf) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return connect(t, l.URL(), l.cfg.connectOptions("fleettest-leaf"), opts)
}

// Cut silences the leaf's link to the hub, both ways.
func (l *Leaf) Cut() { l.proxy.setCut(true) }

// Heal restores the link: the leaf links again on a new connection.
func (l *Leaf) Heal() { l.proxy.setCut(false) }

// Linked reports whether the leaf has a live link to its hub.
func (l *Leaf) Linked() bool {
	s := l.node.server()
	return s != nil && s.NumLeafNodes() > 0
}

// WaitLinked waits until the leaf's link to the hub is up.
func (l *Leaf) WaitLinked(t testing.TB) {
	t.Helper()
	WaitFor(t, l.cfg.readyTimeout, func() error {
		if !l.Linked() {
			return fmt.Errorf("fleettest: the leaf has no link to its hub")
		}
		return nil
	})
}

// WaitUnlinked waits until the leaf has given up its link (after Cut).
func (l *Leaf) WaitUnlinked(t testing.TB) {
	t.Helper()
	WaitFor(t, l.cfg.readyTimeout, func() error {
		if l.Linked() {
			return fmt.Errorf("fleettest: the leaf still has its link to the hub")
		}
		return nil
	})
}

// Shutdown stops the leaf and its proxy.
func (l *Leaf) Shutdown() {
	l.node.stop()
	l.proxy.close()
}
