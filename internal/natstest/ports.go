package natstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for the servers a test starts come from below the kernel's
// ephemeral range, and a port is handed out once per process.
//
// A server restarted on its port (Server.Restart, Cluster.RestartNode)
// needs that port free again. A port the kernel chose for a listener
// (port 0) lies in the ephemeral range, where every outgoing connection
// also takes its local port: with dozens of tests in parallel, each with
// its clients, an outgoing connection took a stopped server's port once in
// a while, and the restart waited out its 30 s for a listener that could
// not bind. Below the range no outgoing connection takes one, and no other
// test of the process is handed one in use.
var ports struct {
	mu     sync.Mutex
	handed map[int]bool
	lo, hi int // [lo, hi): where ports are chosen; hi == 0: the kernel chooses
}

func init() {
	ports.handed = map[int]bool{}
	low := 32768 // Linux's default, when the range cannot be read
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	// 10000 and up: clear of the well-known and most registered services'
	// ports. Fewer than 4,000 to choose from: let the kernel choose.
	if low-10000 >= 4000 {
		ports.lo, ports.hi = 10000, low
	}
}

// freePorts reserves k distinct free TCP ports on 127.0.0.1: free when
// chosen, below the ephemeral range, and handed out to no other caller in
// this process. Another process could still bind one before the server
// does; start then fails with a clear error.
func freePorts(k int) ([]int, error) {
	if ports.hi == 0 {
		return kernelPorts(k)
	}
	ports.mu.Lock()
	defer ports.mu.Unlock()
	out := make([]int, 0, k)
	for tries := 0; len(out) < k; tries++ {
		if tries > 10000 {
			return nil, fmt.Errorf("fleettest: no free port in [%d, %d) after %d tries", ports.lo, ports.hi, tries)
		}
		p := ports.lo + rand.IntN(ports.hi-ports.lo)
		if ports.handed[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use, by this process or another
		}
		_ = l.Close()
		ports.handed[p] = true
		out = append(out, p)
	}
	return out, nil
}

// kernelPorts is freePorts with ports the kernel chooses (released before
// returning: another process could take one in between).
func kernelPorts(k int) ([]int, error) {
	ls := make([]net.Listener, 0, k)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, k)
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("fleettest: reserving a port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
