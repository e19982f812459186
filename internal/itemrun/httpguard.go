package itemrun

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

// ErrHTTPAddressRefused is an http step's call to an address the agent
// does not let the step reach (Config.HTTPAllow).
var ErrHTTPAddressRefused = errors.New("agent: http: address refused")

// httpGuard decides which addresses the agent's http steps may connect
// to, at the moment of connecting (after name resolution, so a name that
// resolves to a refused address is refused too): with no allow-list,
// every address but loopback, link-local, unspecified and multicast ones
// and the agent's own NATS servers; with one, only its networks.
type httpGuard struct {
	allow []netip.Prefix
	nc    *nats.Conn
}

// parseHTTPAllow reads Config.HTTPAllow: IP addresses and CIDR networks.
func parseHTTPAllow(list []string) ([]netip.Prefix, error) { return wire.ParseHTTPAllow(list) }

// check refuses addr ("ip:port") unless the guard lets steps reach it.
func (g *httpGuard) check(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrHTTPAddressRefused, addr, err)
	}
	ip := ap.Addr().Unmap()
	if why := wire.HTTPAddrRefusal(ip, g.allow); why != "" {
		return fmt.Errorf("%w: %s %s", ErrHTTPAddressRefused, addr, why)
	}
	if len(g.allow) > 0 {
		return nil
	}
	if g.natsServer(netip.AddrPortFrom(ip, ap.Port())) {
		return fmt.Errorf("%w: %s is one of the agent's NATS servers", ErrHTTPAddressRefused, addr)
	}
	return nil
}

// natsServer reports whether ap is the address of one of the servers the
// agent's connection knows (the client port, and, since the monitoring
// and cluster ports of the same host must not be reached either, any port
// of those hosts).
func (g *httpGuard) natsServer(ap netip.AddrPort) bool {
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

// client is an http.Client whose connections the guard checks, each
// redirect's among them (followRedirect says which redirects it follows).
func (g *httpGuard) client() *http.Client {
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

// httpStep is the agent's built-in http handler: its calls go through the
// agent's httpGuard.
func (a *Agent) httpStep(ctx context.Context, c *Call) (any, error) {
	a.httpOnce.Do(func() {
		allow, _ := parseHTTPAllow(a.cfg.HTTPAllow) // checked by Config.Validate
		a.httpc = (&httpGuard{allow: allow, nc: a.nc}).client()
	})
	return httpDo(ctx, a.httpc, c)
}
