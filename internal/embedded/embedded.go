// Package embedded starts an in-process nats-server with JetStream for the
// binaries (coordinator without --server, fleetctl run/demo). Tests use
// pkg/fleettest instead.
package embedded

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

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
	s := &Server{}
	if o.StoreDir == "" {
		dir, err := os.MkdirTemp("", "jetfleet-js-")
		if err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
		o.StoreDir, s.tmpDir = dir, dir
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	})
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

// URL is the client URL of the server.
func (s *Server) URL() string { return s.ClientURL() }

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
