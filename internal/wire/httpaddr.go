package wire

import (
	"fmt"
	"net/netip"
	"strings"
)

// The http step's address policy (docs/limits.md "The http handler"),
// shared by the agent, which applies it to every address it connects to,
// and the coordinator, which applies it at submission to the hosts a URL
// writes out as an IP address.

// ParseHTTPAllow reads an http allow-list: IP addresses and CIDR networks.
func ParseHTTPAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("http_allow[%d]: %q is not an IP address or a CIDR network", i, s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// HTTPAddrRefusal says why an http step may not reach ip, or "": with an
// allow-list, any address outside it; without, loopback, link-local (the
// cloud metadata service's 169.254.169.254 among them), unspecified and
// multicast addresses.
func HTTPAddrRefusal(ip netip.Addr, allow []netip.Prefix) string {
	ip = ip.Unmap()
	if len(allow) > 0 {
		for _, p := range allow {
			if p.Contains(ip) {
				return ""
			}
		}
		return "is not in the allow-list (--http-allow)"
	}
	switch {
	case ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(), ip.IsUnspecified(), ip.IsMulticast():
		return "is a loopback, link-local, unspecified or multicast address (--http-allow lets steps reach it)"
	}
	return ""
}

// HTTPHostRefusal applies HTTPAddrRefusal to a URL's host as written:
// an IP address, or "localhost" (and names under .localhost), which is
// loopback by definition. Other names are resolved, and checked, only
// when the step connects.
func HTTPHostRefusal(host string, allow []netip.Prefix) string {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		// Refused unless the allow-list lets one of its addresses through
		// (the agent checks the one it resolves to).
		if HTTPAddrRefusal(netip.AddrFrom4([4]byte{127, 0, 0, 1}), allow) == "" {
			return ""
		}
		return HTTPAddrRefusal(netip.IPv6Loopback(), allow)
	}
	ip, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil {
		return ""
	}
	return HTTPAddrRefusal(ip, allow)
}
