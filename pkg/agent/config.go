package agent

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// Defaults and bounds of Config.
const (
	DefaultConcurrency     = 8
	MaxConcurrency         = 4096
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMaxOutputBytes  = 4 << 10
	// MaxHistory bounds the attempts kept in an item's state and DLQ entry.
	MaxHistory = 100
)

// Config configures an Agent. The zero value is usable: WithDefaults fills it.
type Config struct {
	// Prefix of every subject and resource. Defaults to "fleet".
	Prefix string
	// Pool is the pool whose items the agent runs. Defaults to "default".
	Pool string
	// Name identifies the agent in histories and logs. Defaults to host-pid.
	Name string
	// Concurrency is the number of items run at once. Defaults to 8.
	Concurrency int
	// Prefetch is how many messages the client buffers. Defaults to
	// Concurrency: a larger buffer lets buffered messages' AckWait expire
	// (docs/jetstream.md §9).
	Prefetch int
	// Heartbeat is the InProgress interval during a step. Defaults to a
	// third of the consumer's AckWait.
	Heartbeat time.Duration
	// ShutdownTimeout bounds how long in-flight items may finish after Run's
	// context ends; the rest are cancelled and naked without delay. Defaults to 30s.
	ShutdownTimeout time.Duration
	// WorkDir is the working directory of shell steps. Defaults to the agent's.
	WorkDir string
	// MaxOutputBytes bounds the output kept per step. Defaults to 4 KiB.
	MaxOutputBytes int
	// Provision is used only when the agent creates its pool's consumer
	// because no coordinator has yet.
	Provision provision.Config
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Registerer receives the agent's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock defaults to the system clock; Rand to a seeded source.
	Clock clock.Clock
	Rand  retry.Rand
	// AfterDeadLetter, when set, is called once an item's DLQ entry is
	// stored, before its result and Term. Returning false stops handling the
	// item there, as if the agent had died: the message is neither acked nor
	// naked and comes back after AckWait. A test hook; leave it nil.
	AfterDeadLetter func(jobID, itemID string) bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = messages.DefaultPrefix
	}
	if c.Pool == "" {
		c.Pool = messages.DefaultPool
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "agent"
		}
		c.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Prefetch == 0 {
		c.Prefetch = c.Concurrency
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	c.Provision = c.Provision.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Rand == nil {
		c.Rand = retry.DefaultRand
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := messages.ValidToken(c.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("prefix: %w", err))
	}
	if err := messages.ValidPool(c.Pool); err != nil {
		errs = append(errs, fmt.Errorf("pool: %w", err))
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency: %d, want 1..%d", c.Concurrency, MaxConcurrency))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("prefetch: %d, want >= 1", c.Prefetch))
	}
	if c.Heartbeat < 0 {
		errs = append(errs, fmt.Errorf("heartbeat: %s, want >= 0", c.Heartbeat))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout: %s, want >= 0", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}
