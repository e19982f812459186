package fleettest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// WithLeafHub makes a server (or every node of a cluster) a hub for leaf
// nodes: it accepts their links on 127.0.0.1:port (FreePort gives one)
// and, when domain is not empty, runs its JetStream in that domain, which
// agents behind a leaf node name (agent.Config.JSDomain).
func WithLeafHub(port int, domain string) Option { return Option{natstest.WithLeafHub(port, domain)} }

// Leaf is an embedded leaf-node server whose link to its hub goes through
// a proxy the test can cut (Cut) and restore (Heal), as a site's network
// link is: the leaf's clients stay connected to it while the link is
// silent. URL and Connect are safe for concurrent use; Cut, Heal and
// Shutdown are meant for the test's goroutine.
type Leaf struct{ l *natstest.Leaf }

// RunLeaf starts a leaf node linked to the hub's leaf-node port at hubAddr
// (host:port), by default without JetStream; WithConfig changes its
// options (a JetStream domain of its own, users, the link's credentials
// in o.LeafNode.Remotes[0]). It waits until the link is up and shuts the
// leaf down when t ends.
func RunLeaf(t testing.TB, hubAddr string, opts ...Option) *Leaf {
	t.Helper()
	return &Leaf{natstest.RunLeaf(t, hubAddr, natsOptions(opts)...)}
}

// URL is the leaf's client URL.
func (l *Leaf) URL() string { return l.l.URL() }

// NATSServer is the running leaf server.
func (l *Leaf) NATSServer() *server.Server { return l.l.NATSServer() }

// Connect opens a connection to the leaf, closed when t ends.
func (l *Leaf) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return l.l.Connect(t, opts...)
}

// Cut silences the leaf's link to its hub, both ways.
func (l *Leaf) Cut() { l.l.Cut() }

// Heal restores the link; the leaf links again on a new connection.
func (l *Leaf) Heal() { l.l.Heal() }

// WaitLinked waits until the leaf's link is up.
func (l *Leaf) WaitLinked(t testing.TB) { t.Helper(); l.l.WaitLinked(t) }

// WaitUnlinked waits until the leaf has given up its link (after Cut).
func (l *Leaf) WaitUnlinked(t testing.TB) { t.Helper(); l.l.WaitUnlinked(t) }

// Shutdown stops the leaf.
func (l *Leaf) Shutdown() { l.l.Shutdown() }
