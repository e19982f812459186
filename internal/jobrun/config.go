package jobrun

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Defaults of Config.
const (
	DefaultStatusInterval = 250 * time.Millisecond
	DefaultPublishBatch   = 512
	// DefaultJobQueue is each job's fair share of its pool's work queue:
	// at most this many of its messages in the work stream at once, so a
	// job submitted later starts behind at most this many items of each
	// running job (docs/design.md "Fair share").
	DefaultJobQueue     = 1000
	DefaultMaxSpecBytes = 4 << 20
	// DefaultMaxItems bounds the items of one job: a 1,000,000-item job fits
	// five times over (docs/benchmarks.md measures its memory).
	DefaultMaxItems = 5_000_000
	// DefaultMaxPathNodes bounds the nodes one json_path query may select
	// or visit when it cannot be streamed: a filter over a 1,000,000-item
	// document fits.
	DefaultMaxPathNodes = 20_000_000
	// DefaultMaxGroups bounds the groups group_by may yield (each is a line
	// of the job's status).
	DefaultMaxGroups = 1_000
	// DefaultErrorSignatures is how many error signatures a job's report
	// keeps.
	DefaultErrorSignatures = 20
	// DefaultIntakeMaxDeliveries is how many times a durable submission is
	// tried before it is rejected.
	DefaultIntakeMaxDeliveries = 5
	// DefaultLateResultWindow is how long a finished job keeps following
	// its results for late ones.
	DefaultLateResultWindow = time.Minute
	// DefaultMaxOpenJobs bounds the jobs pending or running at once.
	DefaultMaxOpenJobs = 20_000
	// DefaultMaxPools bounds the pools (work consumers) jobs may create.
	DefaultMaxPools = 100
	// DefaultMaxSchedulesPerPool bounds the schedules whose jobs run on
	// one pool.
	DefaultMaxSchedulesPerPool = 100
	// DefaultSweepInterval is how often the work stream is swept for
	// stranded messages.
	DefaultSweepInterval = time.Minute
	// DefaultAPIDeadline bounds a read request of the API (jobs.status,
	// jobs.list, dlq.list/get/stats/replays): well under a client's
	// timeout, so a request that cannot be answered here fails fast and
	// the client can ask again (another coordinator may answer).
	DefaultAPIDeadline = 2 * time.Second
	// DefaultAPIWriteDeadline bounds the other requests (submit, cancel,
	// replay, purge, prune), which may wait on the leader.
	DefaultAPIWriteDeadline = 30 * time.Second
	// DefaultAPIConcurrency is how many API requests one coordinator
	// handles at once; beyond that a request is answered "unavailable"
	// at once.
	DefaultAPIConcurrency = 64
	// DefaultHealthInterval is how often a coordinator checks that it
	// reaches the cluster (a read from the control bucket's stream leader).
	DefaultHealthInterval = time.Second
	// DefaultHealthFailures is how many checks in a row must fail before
	// the coordinator stops serving the API.
	DefaultHealthFailures = 2
)

// Provision sizes the streams, consumers and buckets the coordinator
// creates. The zero value is usable: every zero field takes its default.
// It is a plain value.
type Provision struct {
	// Replicas of every stream and bucket (1 or 3). Defaults to 1.
	Replicas int
	// AckWait is the crash-detection timeout of work consumers: an item whose
	// agent neither acks nor sends InProgress within it is redelivered.
	// Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver is the backstop on deliveries of one work message, above any
	// configured attempts (snoozes and breaker parking also count). Defaults to 100.
	MaxDeliver int
	// MaxAckPending bounds a pool's unacknowledged work messages, in flight
	// and parked in a delayed nak. Defaults to 20000.
	MaxAckPending int
	// WorkMaxMsgs and WorkMaxBytes bound the work stream; publishers past the
	// limit are refused (DiscardNew) and back off. Defaults: 2,000,000 / unlimited.
	WorkMaxMsgs  int64
	WorkMaxBytes int64
	// Retention is the MaxAge of the jobs (submissions), events and
	// advisories streams. Defaults to 7d. Results, item state and inputs
	// have no age limit: a job's are removed when it settles (the
	// coordinator's retention), so a long job's are kept however old.
	Retention time.Duration
	// DLQMaxAge bounds the age of dead letters; DLQMaxBytes and DLQMaxMsgs
	// are each pool's dead-letter quota (its stream FLEET_DLQ_<pool>; the
	// DLQ stream that sources them has no such limit): a pool at its quota
	// has its dead-letter publishes refused and its agents retry later,
	// other pools are not affected. Defaults: 30d / 16 MiB / unlimited.
	// DLQMaxBytes is reserved of each node's max_file_store, for each pool,
	// when its stream is created (docs/dlq.md, "Each pool's quota is
	// reserved"): MaxPools times it must fit there beside the fleet's data.
	// -1 reserves nothing (no byte quota: bound the pool by DLQMaxMsgs).
	DLQMaxAge   time.Duration
	DLQMaxBytes int64
	DLQMaxMsgs  int64
	// UploadsTTL is the MaxAge of the uploads bucket: uploads whose job was
	// never accepted are removed after it. Defaults to 24h.
	UploadsTTL time.Duration
	// Memory selects memory storage (tests only). Defaults to file storage.
	Memory bool
}

// config converts p into internal/provision's settings, whose fields are
// these (undocumented there): the one place the two meet, a struct
// conversion that compiles only while both have the same fields, so that
// the public Config names no internal type and the two cannot drift
// (TestSettingsConvertFieldForField).
func (p Provision) config() provision.Config { return provision.Config(p) }

// BudgetSettings are the operator's retry-budget settings (RETRY_BUDGET_*,
// docs/retries.md): every field is a count or a percentage of the job's
// items (budget values such as messages.BudgetValue{Count: 20}); nil means
// "not set". The zero value is the out-of-the-box behaviour. A value is
// immutable once in use and safe to share between goroutines.
type BudgetSettings struct {
	// Default is the job budget when a spec sets no retry_budget.
	// Defaults to max(20, 10% of the items).
	Default *messages.BudgetValue
	// Max caps every job budget. Defaults to no cap.
	Max *messages.BudgetValue
	// PerItemDefault caps each item when a spec sets no
	// retry_budget_per_item. Defaults to no per-item cap: the step's
	// attempts bound an item.
	PerItemDefault *messages.BudgetValue
	// PerItemMax caps every per-item budget. Defaults to no cap.
	PerItemMax *messages.BudgetValue
	// Profile gives the fields left unset (nil) its values: "ad44" (20 /
	// 50 / 3 / 5) or "default". "" is "default". A field set explicitly
	// wins over the profile.
	Profile string
}

// settings converts s into internal/budget's settings, whose fields are
// these (undocumented there), as Provision.config does.
func (s BudgetSettings) settings() budget.Settings { return budget.Settings(s) }

// Config configures a Coordinator. The zero value plus a connection is
// usable: WithDefaults fills the rest.
type Config struct {
	// Prefix of every subject and resource. Defaults to "fleet".
	Prefix string
	// JSDomain is the JetStream domain of the fleet's streams and buckets:
	// the hub's (its servers' `jetstream { domain: … }`) for a coordinator connected
	// to a leaf node (docs/deploy.md "Agents at other sites"). Defaults to
	// none: the JetStream of the server connected to.
	JSDomain string
	// Provision sizes streams, consumers and buckets.
	Provision Provision
	// Budget holds the operator's retry-budget settings (RETRY_BUDGET_*).
	Budget BudgetSettings
	// BestEffort holds the operator's best-effort defaults and cap
	// (BEST_EFFORT_*). Zero fields take their defaults.
	BestEffort jobspec.BestEffortSettings
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
	// JobQueue bounds each job's messages in the work stream (queued or
	// being run; parked retries do not count): the fair share of a pool
	// between its jobs. Defaults to DefaultJobQueue (1000); negative:
	// unbounded, jobs run in the order their items were published.
	JobQueue int64
	// MaxSpecBytes bounds a submitted spec, through the API and the durable
	// intake alike. Defaults to 4 MiB (and a spec must also fit, with its
	// status, in the server's max_payload).
	MaxSpecBytes int
	// MaxItems bounds the items of one job; a larger job is rejected.
	// Defaults to 5,000,000.
	MaxItems int64
	// MaxPathNodes bounds the nodes a json_path query that cannot be
	// streamed may select or visit; a query that needs more is rejected.
	// Defaults to 20,000,000.
	MaxPathNodes int64
	// MaxGroups bounds the groups group_by may yield; a job with more is
	// rejected. Defaults to 1,000.
	MaxGroups int
	// MaxOpenJobs bounds the jobs pending or running at once: at the limit
	// jobs.submit is refused (code too_many) and durable submissions wait
	// in the jobs stream until jobs finish. Defaults to 20,000.
	MaxOpenJobs int
	// MaxSchedulesPerPool bounds the schedules whose jobs run on one pool:
	// at the limit schedules.add is refused (code too_many), so that no
	// pool's schedules, and no team's, grow without bound. Defaults to 100.
	MaxSchedulesPerPool int
	// HTTPAllow is the agents' http allow-list (agent.Config.HTTPAllow),
	// applied at submission to the hosts http step URLs write out as an
	// IP address or localhost: without it a URL that names a loopback,
	// link-local (cloud metadata), unspecified or multicast address is
	// refused, with it one outside the list. Give it the agents' list.
	// Defaults to none.
	HTTPAllow []string
	// Pools are the pools the operator configured (--pools): always
	// accepted, whatever MaxPools says.
	Pools []string
	// MaxPools bounds the work stream's pools: a job naming a pool that
	// does not exist yet is refused (field pool) once there are this many.
	// Negative: only Pools are accepted. Defaults to 100.
	MaxPools int
	// Teams are the teams that share the fleet, each with the pools it may
	// submit to (--teams red=poola+poolb,blue=poolc). A team calls the
	// API on its own subjects (messages.Names.TeamAPISubject), submits to
	// its pools only, and sees, cancels, pauses and replays its own jobs
	// only (docs/security.md, "Teams"). Empty: no team endpoints.
	Teams map[string][]string
	// ErrorSignatures is how many error signatures (the most frequent) a
	// job's error report keeps; failures with other signatures are counted
	// in its errors_other. Defaults to 20.
	ErrorSignatures int
	// IntakeMaxDeliveries is how many deliveries of a durable submission
	// are tried (a failure, or a coordinator that died while accepting it)
	// before the job is recorded as rejected with the reason. Defaults to 5.
	IntakeMaxDeliveries int
	// LateResultWindow is how long a finished job's results are still
	// followed: items running when the map phase ended report late results
	// (best_effort.late_results). Defaults to 1m.
	LateResultWindow time.Duration
	// JobRetention is how long a finished job's record is kept; then it is
	// deleted with whatever is left of the job (docs/deploy.md,
	// "Retention"). Defaults to 7d; at least MinJobRetention (10m).
	JobRetention time.Duration
	// CleanupInterval is how often settled jobs are cleaned up and expired
	// records deleted. Defaults to 1m.
	CleanupInterval time.Duration
	// PruneMarkerTTL is how long the marker of a deleted job record stays
	// in the jobs bucket, so that every watcher sees the deletion. Defaults
	// to 1h; at least 1s.
	PruneMarkerTTL time.Duration
	// SweepInterval is how often the work stream is swept for messages
	// stranded at MaxDeliver whose advisory was lost.
	// Defaults to 1m.
	SweepInterval time.Duration
	// SweepMinAge is how long a message must stay stranded before the
	// sweep dead-letters it. Defaults to 5m.
	SweepMinAge time.Duration
	// DLQMonitorInterval is how often the DLQ stream's depth, bytes and
	// oldest entry are read (metrics, the 80% warning). Defaults to 15s.
	DLQMonitorInterval time.Duration
	// LeaseTTL is how long the leader's lease outlives its last renewal:
	// a coordinator that dies is replaced after about this long (renewed
	// every LeaseTTL/4; docs/design.md, "Several coordinators"). Defaults
	// to 4s.
	LeaseTTL time.Duration
	// APIDeadline bounds each read request of the API (status, lists).
	// Defaults to 2s.
	APIDeadline time.Duration
	// APIWriteDeadline bounds each other request of the API. Defaults to
	// 30s.
	APIWriteDeadline time.Duration
	// APIConcurrency bounds the API requests handled at once. Defaults to
	// 64.
	APIConcurrency int
	// HealthInterval is how often the coordinator checks that it reaches
	// the cluster; after HealthFailures failed checks in a row it stops
	// serving the API (so requests go to a coordinator that can answer)
	// until a check succeeds. Defaults to 1s and 2.
	HealthInterval time.Duration
	HealthFailures int
	// Holder names this coordinator in the lease. Defaults to
	// <hostname>-<pid>-<random>.
	Holder string
	// WorkSigner, when set, signs every work item the coordinator
	// publishes (WorkItem.SignedBytes of internal/wire, for the pool it goes to):
	// agents given its public key run nothing else (docs/security.md,
	// "Work items are signed"). An nkeys.KeyPair made from the seed
	// `fleetctl auth init` writes (work-signing.nk) is one. Defaults to
	// nil: items are not signed.
	WorkSigner Signer
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Registerer receives the coordinator's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// TracerProvider records the coordinator's spans (docs/tracing.md); nil =
	// none. The W3C trace context in messages is passed on either way.
	TracerProvider trace.TracerProvider

	// hooks are the clock tests inject through internal/testhooks; zero
	// (the system clock) otherwise.
	hooks testhooks.Coordinator
}

// Signer signs bytes (ed25519 for an nkeys.KeyPair). It must be safe for
// concurrent use.
type Signer interface {
	Sign(input []byte) ([]byte, error)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "fleet"
	}
	c.Provision = Provision(c.Provision.config().WithDefaults())
	orDefault(&c.StatusInterval, DefaultStatusInterval)
	orDefault(&c.PublishBatch, DefaultPublishBatch)
	orDefault(&c.JobQueue, DefaultJobQueue)
	orDefault(&c.MaxSpecBytes, DefaultMaxSpecBytes)
	orDefault(&c.MaxItems, DefaultMaxItems)
	orDefault(&c.MaxPathNodes, DefaultMaxPathNodes)
	orDefault(&c.MaxGroups, DefaultMaxGroups)
	orDefault(&c.ErrorSignatures, DefaultErrorSignatures)
	orDefault(&c.MaxOpenJobs, DefaultMaxOpenJobs)
	orDefault(&c.MaxSchedulesPerPool, DefaultMaxSchedulesPerPool)
	orDefault(&c.MaxPools, DefaultMaxPools)
	orDefault(&c.IntakeMaxDeliveries, DefaultIntakeMaxDeliveries)
	orDefault(&c.LateResultWindow, DefaultLateResultWindow)
	orDefault(&c.LeaseTTL, lease.DefaultTTL)
	orDefault(&c.APIDeadline, DefaultAPIDeadline)
	orDefault(&c.APIWriteDeadline, DefaultAPIWriteDeadline)
	orDefault(&c.APIConcurrency, DefaultAPIConcurrency)
	orDefault(&c.HealthInterval, DefaultHealthInterval)
	orDefault(&c.HealthFailures, DefaultHealthFailures)
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strings.ToLower(nuid.Next()[:8]))
	}
	orDefault(&c.JobRetention, DefaultJobRetention)
	orDefault(&c.CleanupInterval, DefaultCleanupInterval)
	orDefault(&c.PruneMarkerTTL, DefaultPruneMarkerTTL)
	orDefault(&c.SweepInterval, DefaultSweepInterval)
	orDefault(&c.SweepMinAge, dlq.DefaultSweepMinAge)
	if c.hooks.Clock == nil {
		// The server's time: schedule ticks, not_before, deadlines and
		// retention compare times other processes wrote (docs/design.md,
		// "Clocks").
		c.hooks.Clock = clock.NewServer(nil)
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Provision.config().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := natsconn.ValidDomain(c.JSDomain); err != nil {
		errs = append(errs, fmt.Errorf("js_domain: %w", err))
	}
	if err := c.BestEffort.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.StatusInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("status_interval: %s, want >= 1ms", c.StatusInterval))
	}
	for _, d := range []struct {
		name     string
		v, least time.Duration
	}{
		{"job_retention", c.JobRetention, MinJobRetention},
		{"cleanup_interval", c.CleanupInterval, time.Millisecond},
		{"prune_marker_ttl", c.PruneMarkerTTL, time.Second},
		{"sweep_interval", c.SweepInterval, time.Millisecond},
		{"sweep_min_age", c.SweepMinAge, time.Millisecond},
		{"lease_ttl", c.LeaseTTL, lease.MinTTL},
		{"api_deadline", c.APIDeadline, time.Millisecond},
		{"api_write_deadline", c.APIWriteDeadline, time.Millisecond},
		{"health_interval", c.HealthInterval, time.Millisecond},
	} {
		if d.v < d.least {
			errs = append(errs, fmt.Errorf("%s: %s, want >= %s", d.name, d.v, d.least))
		}
	}
	if c.InputDir != "" {
		if st, err := os.Stat(c.InputDir); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("input_dir: %q is not a directory", c.InputDir))
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"publish_batch", int64(c.PublishBatch)},
		{"max_spec_bytes", int64(c.MaxSpecBytes)},
		{"max_items", c.MaxItems},
		{"max_path_nodes", c.MaxPathNodes},
		{"max_groups", int64(c.MaxGroups)},
		{"error_signatures", int64(c.ErrorSignatures)},
		{"intake_max_deliveries", int64(c.IntakeMaxDeliveries)},
		{"api_concurrency", int64(c.APIConcurrency)},
		{"health_failures", int64(c.HealthFailures)},
		{"max_open_jobs", int64(c.MaxOpenJobs)},
		{"max_schedules_per_pool", int64(c.MaxSchedulesPerPool)},
	} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d, want >= 1", f.name, f.v))
		}
	}
	for i, p := range c.Pools {
		if err := messages.ValidPool(p); err != nil {
			errs = append(errs, fmt.Errorf("pools[%d]: %q: %w", i, p, err))
		}
	}
	for team, pools := range c.Teams {
		if err := messages.ValidToken(team); err != nil {
			errs = append(errs, fmt.Errorf("teams: %q: %w", team, err))
		}
		if len(pools) == 0 {
			errs = append(errs, fmt.Errorf("teams.%s: no pools", team))
		}
		for i, p := range pools {
			if err := messages.ValidPool(p); err != nil {
				errs = append(errs, fmt.Errorf("teams.%s[%d]: %q: %w", team, i, p, err))
			}
		}
	}
	if _, err := wire.ParseHTTPAllow(c.HTTPAllow); err != nil {
		errs = append(errs, err)
	}
	if c.MaxPools < 0 && len(c.Pools) == 0 {
		errs = append(errs, errors.New("max_pools: negative (only configured pools) but pools is empty: no job could be accepted"))
	}
	return errors.Join(errs...)
}

// orDefault sets *v to def when *v is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func init() {
	testhooks.RegisterCoordinator(func(cfg any, fn func(*testhooks.Coordinator)) bool {
		c, ok := cfg.(*Config)
		if ok {
			fn(&c.hooks)
		}
		return ok
	})
}
