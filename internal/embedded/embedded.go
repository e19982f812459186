// Package embedded starts an in-process nats-server with JetStream for the
// binaries (coordinator without --server, fleetctl run/demo). Tests use
// pkg/fleettest instead.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetfleet/jetfleet/internal/auth"
)

// ErrInsecureListen is returned by Start for a server that would accept
// connections from other machines without credentials.
var ErrInsecureListen = errors.New("embedded: listening beyond this machine needs credentials")

// Options for Start.
type Options struct {
	// Host to listen on. Defaults to 127.0.0.1.
	Host string
	// Port to listen on; -1 picks a free one. Defaults to -1.
	Port int
	// StoreDir holds JetStream files. Empty = a new temporary directory,
	// removed by Shutdown.
	StoreDir string
	// ServerName defaults to "jetfleet-embedded".
	ServerName string
	// AuthDir is a directory `fleetctl auth init` wrote: the server then
	// admits only its users, each with its role's permissions (and turns
	// TLS on if it was generated with --tls). Without it the server admits
	// anyone, so Start refuses a Host other than a loopback address.
	AuthDir string
}

// IsLoopback reports whether host only accepts connections from this
// machine: "localhost" or a loopback IP address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server is a running embedded server. Safe for concurrent use.
type Server struct {
	*server.Server
	tmpDir string
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = -1
	}
	if o.ServerName == "" {
		o.ServerName = "jetfleet-embedded"
	}
	if !IsLoopback(o.Host) && o.AuthDir == "" {
		return nil, fmt.Errorf("%w: %s accepts connections from other machines, and the embedded server has no users; "+
			"pass --auth-dir DIR (written by `fleetctl auth init DIR`) so that every process needs its own key, "+
			"or listen on 127.0.0.1", ErrInsecureListen, net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	}
	s := &Server{}
	if o.StoreDir == "" {
		dir, err := os.MkdirTemp("", "jetfleet-js-")
		if err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
		o.StoreDir, s.tmpDir = dir, dir
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	}
	if o.AuthDir != "" {
		if err := auth.ServerOptions(o.AuthDir, opts); err != nil {
			s.cleanup()
			return nil, fmt.Errorf("embedded: --auth-dir: %w", err)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("embedded: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		s.cleanup()
		return nil, fmt.Errorf("embedded: server not ready after 10s")
	}
	s.Server = ns
	return s, nil
}

// URL is the client URL of the server for a client on this machine: a
// loopback address when the server listens on every interface.
func (s *Server) URL() string {
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		return s.ClientURL()
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return u.String()
}

// Shutdown stops the server and removes a temporary store.
func (s *Server) Shutdown() {
	if s.Server != nil {
		s.Server.Shutdown()
		s.Server.WaitForShutdown()
	}
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
	}
}
