package natstest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultReadyTimeout bounds how long RunServer and RunCluster wait for a
// server (or a cluster's meta leader) to be ready.
const DefaultReadyTimeout = 30 * time.Second

// Option configures RunServer and RunCluster.
type Option func(*config)

type config struct {
	storeDir     string
	configure    []func(*server.Options)
	connOpts     []nats.Option
	readyTimeout time.Duration
	serverLogs   bool
	account      string
	partitions   bool
}

func (c *config) accountName() string {
	if c.account == "" {
		return server.DEFAULT_GLOBAL_ACCOUNT
	}
	return c.account
}

// WithAccount names the account whose streams the cluster's leader helpers
// look at. Defaults to the global account ("$G"), where clients land when
// no accounts are configured.
func WithAccount(name string) Option {
	return func(c *config) { c.account = name }
}

func newConfig(opts []Option) config {
	c := config{readyTimeout: DefaultReadyTimeout}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithStoreDir keeps JetStream files in dir instead of a fresh directory
// (newStoreDir). For a cluster, node i uses dir/<node name>.
func WithStoreDir(dir string) Option {
	return func(c *config) { c.storeDir = dir }
}

// WithConfig changes the server options before each start (including
// restarts), e.g. to add users and permissions for auth tests. For a
// cluster it applies to every node. It runs after fleettest's defaults, so
// it may override them; do not change ports of a cluster node.
func WithConfig(fn func(*server.Options)) Option {
	return func(c *config) {
		if fn != nil {
			c.configure = append(c.configure, fn)
		}
	}
}

// WithConnectOptions adds options to every client connection fleettest
// makes (the default one and those from Connect), e.g. nats.UserInfo when
// WithConfig requires authentication.
func WithConnectOptions(opts ...nats.Option) Option {
	return func(c *config) { c.connOpts = append(c.connOpts, opts...) }
}

// WithReadyTimeout changes how long to wait for readiness. Defaults to
// DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.readyTimeout = d
		}
	}
}

// WithServerLogs sends the server's notices, warnings and errors to t.Log.
func WithServerLogs() Option {
	return func(c *config) { c.serverLogs = true }
}

// baseOptions are fleettest's defaults for one node.
func baseOptions(name, storeDir string) *server.Options {
	return &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
		// Keep a test's footprint modest; WithConfig can raise them.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
	}
}

func (c *config) connectOptions(name string) []nats.Option {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.Timeout(2 * time.Second),
	}
	return append(opts, c.connOpts...)
}

// tLogger forwards server logs to a test until the test is over.
type tLogger struct {
	t      testing.TB
	prefix string
	done   *atomic.Bool
}

func (l tLogger) logf(level, format string, v ...any) {
	if l.done.Load() {
		return
	}
	l.t.Logf("%s %s %s", l.prefix, level, fmt.Sprintf(format, v...))
}

func (l tLogger) Noticef(format string, v ...any) { l.logf("[INF]", format, v...) }
func (l tLogger) Warnf(format string, v ...any)   { l.logf("[WRN]", format, v...) }
func (l tLogger) Fatalf(format string, v ...any)  { l.logf("[FTL]", format, v...) }
func (l tLogger) Errorf(format string, v ...any)  { l.logf("[ERR]", format, v...) }
func (l tLogger) Debugf(format string, v ...any)  {}
func (l tLogger) Tracef(format string, v ...any)  {}
