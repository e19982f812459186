package coordinator

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/api"
	"github.com/jetfleet/jetfleet/internal/jobrun"
)

// Config is a coordinator's configuration: the prefix, the operator's
// stream, consumer and bucket settings, the bounds of a job, and the
// logger, metrics registry and tracer provider. The zero value, after
// WithDefaults, runs a coordinator of the "jetfleet" prefix.
type Config = jobrun.Config

// Provision holds the stream, consumer and bucket settings the coordinator
// creates its JetStream assets with (Config.Provision).
type Provision = jobrun.Provision

// BudgetSettings holds the default and maximum retry budgets of jobs and
// items, and the budget profile (Config.Budget).
type BudgetSettings = jobrun.BudgetSettings

// Signer signs the work messages the coordinator publishes, for agents
// that verify them (Config.WorkSigner).
type Signer = jobrun.Signer

// Defaults of Config's intake and publishing.
const (
	DefaultStatusInterval      = jobrun.DefaultStatusInterval
	DefaultPublishBatch        = jobrun.DefaultPublishBatch
	DefaultJobQueue            = jobrun.DefaultJobQueue
	DefaultMaxSpecBytes        = jobrun.DefaultMaxSpecBytes
	DefaultMaxItems            = jobrun.DefaultMaxItems
	DefaultMaxPathNodes        = jobrun.DefaultMaxPathNodes
	DefaultMaxGroups           = jobrun.DefaultMaxGroups
	DefaultMaxOpenJobs         = jobrun.DefaultMaxOpenJobs
	DefaultMaxPools            = jobrun.DefaultMaxPools
	DefaultMaxSchedulesPerPool = jobrun.DefaultMaxSchedulesPerPool
	DefaultErrorSignatures     = jobrun.DefaultErrorSignatures
	DefaultIntakeMaxDeliveries = jobrun.DefaultIntakeMaxDeliveries
)

// Defaults and bounds of retention.
const (
	DefaultLateResultWindow = jobrun.DefaultLateResultWindow
	DefaultJobRetention     = jobrun.DefaultJobRetention
	MinJobRetention         = jobrun.MinJobRetention
	DefaultCleanupInterval  = jobrun.DefaultCleanupInterval
	DefaultPruneMarkerTTL   = jobrun.DefaultPruneMarkerTTL
)

// Defaults and bounds of the dead-letter sweep, monitor, pages and replays.
const (
	DefaultSweepInterval      = jobrun.DefaultSweepInterval
	DefaultDLQMonitorInterval = jobrun.DefaultDLQMonitorInterval
	DefaultDLQPageSize        = api.DefaultDLQPageSize
	DLQScanLimit              = jobrun.DLQScanLimit
	DLQEventsJob              = jobrun.DLQEventsJob
	DefaultReplayWait         = api.DefaultReplayWait
	MaxReplayWait             = api.MaxReplayWait
)

// Defaults and bounds of the API: deadlines, health checks, list pages.
const (
	DefaultAPIDeadline      = jobrun.DefaultAPIDeadline
	DefaultAPIWriteDeadline = jobrun.DefaultAPIWriteDeadline
	DefaultAPIConcurrency   = jobrun.DefaultAPIConcurrency
	DefaultHealthInterval   = jobrun.DefaultHealthInterval
	DefaultHealthFailures   = jobrun.DefaultHealthFailures
	DefaultListLimit        = jobrun.DefaultListLimit
	MaxListLimit            = jobrun.MaxListLimit
	LeaderStatusWait        = api.LeaderStatusWait
)

// Coordinator runs jobs for one prefix: it serves the API, and while it
// holds the prefix's lease it accepts, expands, publishes and follows
// jobs. The jobs' operations (submit, status, cancel, pause, prune, the
// dead letters and schedules) are pkg/client's: a program that runs a
// coordinator drives it through a client like any other. Safe for
// concurrent use.
type Coordinator struct {
	e *jobrun.Coordinator
}

// New validates cfg (after its defaults) and returns a coordinator that
// does nothing until Run.
func New(nc *nats.Conn, cfg Config) (*Coordinator, error) {
	e, err := jobrun.New(nc, cfg)
	if err != nil {
		return nil, err
	}
	return &Coordinator{e: e}, nil
}

// Run creates or updates the prefix's streams and buckets, serves the API
// and, in every term it leads, runs the jobs; it returns when ctx ends
// (nil) or when the coordinator cannot go on (its connection is lost).
func (c *Coordinator) Run(ctx context.Context) error { return c.e.Run(ctx) }

// Ready is closed once Run has provisioned the prefix's assets and serves
// the API.
func (c *Coordinator) Ready() <-chan struct{} { return c.e.Ready() }

// OnLeader registers work that runs in every leadership term of this
// coordinator, with a context that ends with the term. Call it before Run.
func (c *Coordinator) OnLeader(name string, run func(ctx context.Context) error) {
	c.e.OnLeader(name, run)
}

// Leader returns the holder of the prefix's lease as this coordinator last
// saw it, or "" when none holds it: this coordinator leads when it is its
// Config.Holder.
func (c *Coordinator) Leader() string { return c.e.Leader() }
