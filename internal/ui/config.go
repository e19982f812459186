package ui

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
)

// Defaults and bounds of Config.
const (
	// DefaultAddr binds the dashboard to the loopback interface.
	DefaultAddr = "127.0.0.1:8080"
	// DefaultRequestTimeout bounds each call the dashboard makes to the
	// fleet (an API request, a stream read) while serving a page.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultPageSize is the number of jobs or dead letters on a page.
	DefaultPageSize = 50
	// MaxPageSize bounds the page size a visitor may ask for.
	MaxPageSize = 500
	// DefaultFlushInterval is how often live job updates are sent to the
	// browsers (a running job's record changes every 250 ms; the browsers
	// get its latest state at most this often).
	DefaultFlushInterval = 500 * time.Millisecond
	// DefaultClientBuffer is how many live messages may wait for one
	// browser; a browser that falls this far behind is disconnected (its
	// EventSource reconnects) so that it never holds the others up.
	DefaultClientBuffer = 64
	// DefaultMaxClients bounds the browsers connected for live updates.
	DefaultMaxClients = 256
	// MinTokenLength bounds the access token from below.
	MinTokenLength = 16
)

// Config configures a Server. The zero value is usable: WithDefaults fills it.
type Config struct {
	// Addr is the address the dashboard listens on. Defaults to
	// 127.0.0.1:8080. An address that is not loopback needs AllowRemote.
	Addr string
	// AllowRemote permits an Addr that other machines can reach, and turns
	// the Host check (against DNS rebinding) off; the server logs a warning
	// when it starts. The access token travels in clear without TLS: put
	// the dashboard behind a TLS proxy. Defaults to false.
	AllowRemote bool
	// Token is the access token every request must carry (the login cookie
	// that ?token=<token> sets, a bearer token, or basic auth's password),
	// on loopback too: any local process could otherwise cancel jobs and
	// purge the DLQ. At least MinTokenLength characters. Defaults to a
	// random token made by New (Server.Token, Server.LoginURL).
	Token string
	// ReadOnly hides and refuses every action that changes the fleet
	// (cancel, replay, purge). Defaults to false.
	ReadOnly bool
	// Prefix of the fleet's subjects and resources. Defaults to "fleet".
	Prefix string
	// JSDomain is the JetStream domain of the fleet's streams (the hub's,
	// through a leaf node). Defaults to none.
	JSDomain string
	// RequestTimeout bounds each call to the fleet. Defaults to 10s.
	RequestTimeout time.Duration
	// PageSize is the default number of rows on a page. Defaults to 50.
	PageSize int
	// FlushInterval is how often live job updates go out. Defaults to 500ms.
	FlushInterval time.Duration
	// ClientBuffer is the live messages queued per browser. Defaults to 64.
	ClientBuffer int
	// MaxClients bounds the browsers receiving live updates. Defaults to 256.
	MaxClients int
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Registerer receives the dashboard's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock defaults to the server's time (clock.Server over the system
	// clock).
	Clock clock.Clock
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Prefix == "" {
		c.Prefix = "fleet"
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.ClientBuffer == 0 {
		c.ClientBuffer = DefaultClientBuffer
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.Clock == nil {
		c.Clock = clock.NewServer(nil) // the server's time (docs/design.md, "Clocks")
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if host, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("addr: %q: %w", c.Addr, err))
	} else if !c.AllowRemote && !IsLoopback(host) {
		errs = append(errs, fmt.Errorf("addr: %q: %w", c.Addr, ErrRemoteListen))
	}
	if c.Token != "" && len(c.Token) < MinTokenLength {
		errs = append(errs, fmt.Errorf("token: %d characters, want >= %d: %w", len(c.Token), MinTokenLength, ErrShortToken))
	}
	if c.RequestTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("request_timeout: %s, want >= 100ms", c.RequestTimeout))
	}
	if c.PageSize < 1 || c.PageSize > MaxPageSize {
		errs = append(errs, fmt.Errorf("page_size: %d, want 1..%d", c.PageSize, MaxPageSize))
	}
	if c.FlushInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("flush_interval: %s, want >= 10ms", c.FlushInterval))
	}
	if c.ClientBuffer < 1 {
		errs = append(errs, fmt.Errorf("client_buffer: %d, want >= 1", c.ClientBuffer))
	}
	if c.MaxClients < 1 {
		errs = append(errs, fmt.Errorf("max_clients: %d, want >= 1", c.MaxClients))
	}
	return errors.Join(errs...)
}

// IsLoopback reports whether host (a name or an IP, without port) can only
// be reached from this machine: "localhost" or a loopback address. An
// empty host (all interfaces) is not.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
