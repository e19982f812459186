package natstest

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// WithPartitions routes the traffic between every two nodes of a cluster
// through a proxy the test can cut (Cluster.Cut) and heal (Cluster.Heal),
// as a node taken off the cluster network is: its client connections stay
// up, its routes go silent (no reset, nothing delivered) until the servers'
// route pings give up on them. The nodes advertise no address another node
// could route to directly, so every route stays on a proxy. Set the
// servers' Cluster.PingInterval and MaxPingsOut (WithConfig) to say how
// soon a silent route is given up. Cluster only.
func WithPartitions() Option {
	return func(c *config) { c.partitions = true }
}

// routeProxy forwards one node's routes to another: node from's connections
// to node to, through a listener only from dials.
type routeProxy struct {
	from, to int
	ln       net.Listener
	target   string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool // both ends of every open pair; true: open while cut
	done  bool
}

// newRouteProxy listens; start forwards to target. The listener is made
// before the nodes' ports are chosen, so that it cannot take one of them.
func newRouteProxy(from, to int) (*routeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fleettest: route proxy: %w", err)
	}
	return &routeProxy{from: from, to: to, ln: ln, conns: map[net.Conn]bool{}}, nil
}

// start forwards what the proxy accepts to target.
func (p *routeProxy) start(target string) {
	p.target = target
	go p.accept()
}

func (p *routeProxy) addr() string { return p.ln.Addr().String() }

func (p *routeProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

// serve forwards in to the target while the proxy is not cut; a connection
// made while it is cut is held open and hears nothing.
func (p *routeProxy) serve(in net.Conn) {
	if !p.track(in) {
		return
	}
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		_, _ = io.Copy(io.Discard, in)
		p.untrack(in)
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(in)
		return
	}
	if !p.track(out) {
		p.untrack(in)
		return
	}
	go func() { p.pipe(out, in); p.untrack(in); p.untrack(out) }()
	p.pipe(in, out)
	p.untrack(in)
	p.untrack(out)
}

// pipe copies src to dst, dropping what it reads while the proxy is cut.
func (p *routeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *routeProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		_ = c.Close()
		return false
	}
	p.conns[c] = p.cut
	return true
}

func (p *routeProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *routeProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut == p.cut {
		return
	}
	p.cut = cut
	for c := range p.conns {
		if cut {
			p.conns[c] = true
			continue
		}
		// Healing: what was open across the cut lost bytes both ways;
		// the servers route again on fresh connections.
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *routeProxy) close() {
	p.mu.Lock()
	p.done = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}

// Cut takes node i off the cluster network: its routes to and from every
// other node go silent. Its clients stay connected to it. Needs
// WithPartitions.
func (c *Cluster) Cut(i int) { c.setCut(i, true) }

// Heal puts node i back on the cluster network: the connections that were
// open across the cut are closed and the servers route again.
func (c *Cluster) Heal(i int) { c.setCut(i, false) }

func (c *Cluster) setCut(i int, cut bool) {
	if len(c.proxies) == 0 {
		panic("fleettest: Cut and Heal need WithPartitions")
	}
	for _, p := range c.proxies {
		if p.from == i || p.to == i {
			p.setCut(cut)
		}
	}
}
