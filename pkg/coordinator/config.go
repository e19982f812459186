package coordinator

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/budget"
)

// Defaults of Config.
const (
	DefaultStatusInterval = 250 * time.Millisecond
	DefaultPublishBatch   = 512
	DefaultMaxSpecBytes   = 4 << 20
	// DefaultLateResultWindow is how long a finished job keeps following
	// its results for late ones.
	DefaultLateResultWindow = time.Minute
)

// Config configures a Coordinator. The zero value plus a connection is
// usable: WithDefaults fills the rest.
type Config struct {
	// Prefix of every subject and resource. Defaults to "fleet".
	Prefix string
	// Provision sizes streams, consumers and buckets.
	Provision provision.Config
	// Budget holds the operator's retry-budget settings (RETRY_BUDGET_*).
	Budget budget.Settings
	// InputDir enables file inputs: a submission may then name a file in
	// this directory (file://items.json, or items.json), and nothing
	// outside it (absolute paths, "..", symbolic links leading out are
	// refused). Empty (the default): file inputs are refused, and items
	// come inline or from the uploads bucket. docs/security.md.
	InputDir string
	// StatusInterval throttles job-status writes. Defaults to 250ms.
	StatusInterval time.Duration
	// PublishBatch is how many work messages are in flight to the stream at
	// once per job. Defaults to 512.
	PublishBatch int
	// MaxSpecBytes bounds a submitted spec. Defaults to 4 MiB.
	MaxSpecBytes int
	// LateResultWindow is how long a finished job's results are still
	// followed: items running when the map phase ended report late results
	// (best_effort.late_results). Defaults to 1m.
	LateResultWindow time.Duration
	// DLQMonitorInterval is how often the DLQ stream's depth, bytes and
	// oldest entry are read (metrics, the 80% warning). Defaults to 15s.
	DLQMonitorInterval time.Duration
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Registerer receives the coordinator's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock defaults to the system clock.
	Clock clock.Clock
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "fleet"
	}
	c.Provision = c.Provision.WithDefaults()
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.PublishBatch == 0 {
		c.PublishBatch = DefaultPublishBatch
	}
	if c.MaxSpecBytes == 0 {
		c.MaxSpecBytes = DefaultMaxSpecBytes
	}
	if c.LateResultWindow == 0 {
		c.LateResultWindow = DefaultLateResultWindow
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Provision.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.StatusInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("status_interval: %s, want >= 1ms", c.StatusInterval))
	}
	if c.InputDir != "" {
		if st, err := os.Stat(c.InputDir); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("input_dir: %q is not a directory", c.InputDir))
		}
	}
	if c.PublishBatch < 1 {
		errs = append(errs, fmt.Errorf("publish_batch: %d, want >= 1", c.PublishBatch))
	}
	return errors.Join(errs...)
}
