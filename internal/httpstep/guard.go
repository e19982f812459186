package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// ErrAddressRefused is an http step's call to an address the agent
// does not let the step reach (its http_allow).
var ErrAddressRefused = errors.New("agent: http: address refused")

// Guard decides which addresses the agent's http steps may connect
// to, at the moment of connecting (after name resolution, so a name that
// resolves to a refused address is refused too): with no allow-list,
// every address but loopback, link-local, unspecified and multicast ones
// and the agent's own NATS servers; with one, only its networks.
// It is safe for concurrent use.
type Guard struct {
	allow []netip.Prefix
	nc    *nats.Conn
}

// NewGuard returns the guard of an agent with allow-list allow (nil: the
// default rules) whose NATS connection is nc (nil: none).
func NewGuard(allow []netip.Prefix, nc *nats.Conn) *Guard { return &Guard{allow: allow, nc: nc} }

// ParseAllow reads an agent's http_allow: IP addresses and CIDR networks.
func ParseAllow(list []string) ([]netip.Prefix, error) { return wire.ParseHTTPAllow(list) }

// check refuses addr ("ip:port") unless the guard lets steps reach it.
func (g *Guard) check(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAddressRefused, addr, err)
	}
	ip := ap.Addr().Unmap()
	if why := wire.HTTPAddrRefusal(ip, g.allow); why != "" {
		return fmt.Errorf("%w: %s %s", ErrAddressRefused, addr, why)
	}
	if len(g.allow) > 0 {
		return nil
	}
	if g.natsServer(netip.AddrPortFrom(ip, ap.Port())) {
		return fmt.Errorf("%w: %s is one of the agent's NATS servers", ErrAddressRefused, addr)
	}
	return nil
}

// natsServer reports whether ap is the address of one of the servers the
// agent's connection knows (the client port, and, since the monitoring
// and cluster ports of the same host must not be reached either, any port
// of those hosts).
func (g *Guard) natsServer(ap netip.AddrPort) bool {
	if g.nc == nil {
		return false
	}
	urls := append(g.nc.Servers(), g.nc.DiscoveredServers()...)
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		host := u.Hostname()
		if a, err := netip.ParseAddr(host); err == nil {
			if a.Unmap() == ap.Addr() {
				return true
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range ips {
			if a.Unmap() == ap.Addr() {
				return true
			}
		}
	}
	return false
}

// Client is an http.Client whose connections the guard checks, each
// redirect's among them (followRedirect says which redirects it follows).
func (g *Guard) Client() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error { return g.check(address) }}
	return &http.Client{
		Transport: &http.Transport{
			// Through a proxy (HTTP_PROXY, HTTPS_PROXY), the guard checks
			// the proxy's address: the proxy polices the rest.
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         dialer.DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		},
		CheckRedirect: followRedirect,
	}
}
