package itemrun

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/httpstep"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DefaultClaudeArgs are Config.ClaudeArgs' default: Claude Code's headless
// mode, the reply on stdout.
var DefaultClaudeArgs = []string{"--print"}

// Defaults and bounds of Config.
const (
	DefaultConcurrency     = 8
	MaxConcurrency         = 4096
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMaxOutputBytes  = 4 << 10
	// DefaultKeepFailed and DefaultKeepFailedBytes bound the directories
	// of failed deliveries kept (Config.KeepFailed, KeepFailedBytes).
	DefaultKeepFailed      = 16
	DefaultKeepFailedBytes = 64 << 20
	// DefaultClaudeCommand is Config.ClaudeCommand's default.
	DefaultClaudeCommand = "claude"
	// DefaultStepTimeout bounds a step that sets no timeout of its own, so
	// that a hung step never holds an item forever.
	DefaultStepTimeout = time.Hour
	// MaxHistory bounds the attempts kept in an item's state and DLQ entry.
	MaxHistory = 100
	// DefaultPresenceInterval is how often an agent rewrites its presence
	// in the agents bucket.
	DefaultPresenceInterval = 5 * time.Second
	// MinPresenceInterval bounds PresenceInterval from below.
	MinPresenceInterval = 100 * time.Millisecond
	// DefaultResultBatch is how many results of one job an agent sends in
	// one message at most, and MaxResultBatch the bound of ResultBatch.
	DefaultResultBatch = 256
	MaxResultBatch     = 4096
	// MaxPrefetch bounds the adaptive prefetch (Config.Prefetch 0), and
	// MaxPrefetchFixed a fixed one.
	MaxPrefetch      = 512
	MaxPrefetchFixed = 65536
	// DefaultResultLinger is how long a result may wait for others to
	// share its message, and MaxResultLinger the bound of ResultLinger.
	DefaultResultLinger = 5 * time.Millisecond
	MaxResultLinger     = time.Minute
	// DefaultParkAfter is the shortest retry delay that is parked rather
	// than naked with a delay (docs/retries.md "Parking" says how it was
	// measured).
	DefaultParkAfter = 5 * time.Second
	// MinParkAfter bounds ParkAfter from below: a message schedule fires
	// no sooner than 250 ms after the server last looked.
	MinParkAfter = time.Second
	// DefaultLocalRetryMax is the longest retry delay an agent waits out
	// itself before it runs the item again (Config.LocalRetryMax).
	DefaultLocalRetryMax = time.Second
	// DefaultLimitLease is how long a limit's concurrency slot stays held
	// after its agent stops renewing it (it died), and DefaultLimitWait
	// how long a run waits in the agent for a limit's token or slot
	// before it waits outside (a delayed nak, or parked).
	DefaultLimitLease = 30 * time.Second
	DefaultLimitWait  = time.Second
	// MinLimitLease bounds LimitLease from below.
	MinLimitLease = 100 * time.Millisecond
	// DefaultKillGrace is how long a shell step's process group has
	// between SIGTERM and SIGKILL when the step is ended early.
	DefaultKillGrace = 2 * time.Second
)

// Verifier checks a signature of input (ed25519 for an nkeys.KeyPair). It
// must be safe for concurrent use.
type Verifier interface {
	Verify(input []byte, sig []byte) error
}

// ReaperMode is how an agent deals with the processes its shell steps leave
// behind (Linux only).
type ReaperMode int

const (
	// ReaperOff kills, when a step ends, what it left in its process group
	// (background jobs); processes that left the group (setsid, nohup,
	// double forks) survive the step, and orphans go to init.
	ReaperOff ReaperMode = iota
	// ReaperSteps makes the process a child subreaper: everything a step
	// leaves behind, in its process group or not, is killed and reaped when
	// the step ends (success, failure, timeout or cancellation). Child
	// processes the rest of the program starts are left alone, so a
	// process that leaves its session, clears its environment and dies on
	// its own before its step ends may stay a zombie until the program
	// exits.
	ReaperSteps
	// ReaperAll is ReaperSteps that also reaps every other orphan, and
	// kills at the end of a step any orphan no running step owns: for a
	// program whose only child processes are steps, such as cmd/agent,
	// which is PID 1 in its container and must reap whatever is orphaned
	// there.
	ReaperAll
)

// Config configures an Agent. The zero value is usable: WithDefaults fills it.
type Config struct {
	// Prefix of every subject and resource. Defaults to "fleet".
	Prefix string
	// Pool is the pool whose items the agent runs. Defaults to "default".
	Pool string
	// JSDomain is the JetStream domain of the fleet's streams and buckets:
	// the hub's (its servers' `jetstream { domain: … }`) for an agent connected
	// to a leaf node (docs/deploy.md "Agents at other sites"). Defaults to
	// none: the JetStream of the server connected to.
	JSDomain string
	// Name identifies the agent in histories and logs. Defaults to host-pid.
	Name string
	// Concurrency is the number of items run at once. An item whose failed
	// run ends what its delivery runs gives its slot to the next item: its
	// bookkeeping (the budget claim, the state write and delayed nak, the
	// dead letter) holds none. Defaults to 8.
	Concurrency int
	// Prefetch fixes how many work messages the agent buffers ahead of its
	// workers. Defaults to adaptive: as many as the workers get through in
	// 250ms at the items' average time, between Concurrency and
	// MaxPrefetch, so that short items never starve the workers and a
	// buffered message's AckWait is never spent waiting (docs/jetstream.md
	// §9).
	Prefetch int
	// ResultBatch is how many results of one job the agent sends in one
	// message at most (fewer when max_payload would be exceeded); 1 sends
	// each result alone. Defaults to DefaultResultBatch (256).
	ResultBatch int
	// ResultLinger is how long a finished item's result waits for more of
	// its job's results to share its message; its work message is acked
	// only once that message is stored. Defaults to DefaultResultLinger
	// (5ms).
	ResultLinger time.Duration
	// Heartbeat is the InProgress interval during a step. Defaults to a
	// third of the consumer's AckWait.
	Heartbeat time.Duration
	// ShutdownTimeout bounds how long in-flight items may finish after Run's
	// context ends; the rest are cancelled and naked without delay. Defaults to 30s.
	ShutdownTimeout time.Duration
	// KillGrace is how long a shell step's process group has between
	// SIGTERM and SIGKILL when the step is ended early: its timeout, a
	// cancel with kill (fleetctl cancel --kill), or shutdown. Defaults to
	// DefaultKillGrace (2s).
	KillGrace time.Duration
	// WorkDir holds the directories of the items' shell steps: each
	// delivery of a map item runs in a fresh directory under
	// WorkDir/jetfleet-items, removed when it ends (docs/job-spec.md, "A
	// directory per item"). Defaults to the agent's working directory.
	WorkDir string
	// ClaudeCommand is Claude Code's CLI, which runs claude steps
	// headless: a path, or a name looked up on the agent's PATH when Run
	// starts. An agent that finds it announces CapabilityClaude in its
	// presence. Defaults to "claude".
	ClaudeCommand string
	// ClaudeArgs are the arguments before the prompt. Defaults to
	// DefaultClaudeArgs ("--print": headless, the reply on stdout).
	ClaudeArgs []string
	// KeepFailed is how many directories of failed deliveries are kept
	// for inspection (WorkDir/jetfleet-failed), the most recent. Defaults
	// to DefaultKeepFailed; negative keeps none.
	KeepFailed int
	// KeepFailedBytes is the largest directory of a failed delivery that
	// is kept. Defaults to DefaultKeepFailedBytes (64 MiB).
	KeepFailedBytes int64
	// MaxOutputBytes bounds the output kept per step. Defaults to 4 KiB.
	MaxOutputBytes int
	// StepTimeout bounds one run of a step (shell or handler) whose spec
	// sets no timeout; a step's own timeout overrides it. Defaults to
	// DefaultStepTimeout (1h).
	StepTimeout time.Duration
	// StepEnv lists more variables of the agent's environment that shell
	// steps see, on top of PATH, HOME, USER, LOGNAME, SHELL, LANG,
	// LANGUAGE, LC_* (every locale variable), TZ and TMPDIR: names (AWS_REGION) or prefixes ending in "*"
	// (AWS_*). A step sees these, the job's env, and the item's variables,
	// nothing else of the agent's. Names of the agent's own settings and
	// credentials (NATS_*, FLEET_*) are refused unless StepEnvUnsafe is set.
	StepEnv []string
	// StepEnvUnsafe lets StepEnv name NATS_* and FLEET_* variables, handing
	// what they hold (credentials, server URLs with passwords) to every job
	// submitter. Defaults to false.
	StepEnvUnsafe bool
	// SecretEnv lists the variables of the agent's environment that jobs'
	// secrets may read (secrets: {provider: env}): names (API_KEY) or
	// prefixes ending in "*" (JOB_SECRET_*; "*" alone: all). NATS_* and
	// FLEET_* are never read unless StepEnvUnsafe is set. Defaults to none.
	SecretEnv []string
	// SecretDirs are the directories whose files jobs' env_files and file
	// secrets may name; a relative path is read under the first. Files are
	// opened through an os.Root, so a link does not lead out. Defaults to
	// none: env files are skipped as missing, file secrets fail.
	SecretDirs []string
	// HTTPAllow lists the IP addresses and CIDR networks the built-in http
	// step may connect to ("10.0.0.0/8", "127.0.0.1"); when set, no other.
	// Defaults to none: any address but loopback, link-local, unspecified
	// and multicast ones and the agent's own NATS servers (docs/limits.md,
	// "The http handler").
	HTTPAllow []string
	// Environ is the agent's environment that StepEnv selects from.
	// Defaults to os.Environ.
	Environ func() []string
	// Reaper is how the agent deals with processes its shell steps leave
	// behind. Defaults to ReaperOff for a library agent; cmd/agent uses
	// ReaperAll. See ReaperMode.
	Reaper ReaperMode
	// PresenceInterval is how often the agent writes its presence (name,
	// pool, items in flight) to the agents bucket, which dashboards read.
	// Defaults to 5s; negative turns it off.
	PresenceInterval time.Duration
	// ParkAfter is the shortest retry or snooze delay that is parked in
	// the park stream (no MaxAckPending slot held while it waits) rather
	// than naked with the delay. Defaults to DefaultParkAfter (5s);
	// negative: never park.
	ParkAfter time.Duration
	// LocalRetryMax is the longest retry or snooze delay after which the
	// agent runs the item again itself (a local retry), rather than naking
	// it with the delay for any agent of the pool to take (localretry.go):
	// the budget is claimed as for any retry, the item's state is written
	// when the delivery leaves the agent, and at most three local retries
	// follow each other. It applies only while the delivery is far from
	// its AckWait. Defaults to DefaultLocalRetryMax (1s); negative: every
	// retry is a delayed nak.
	LocalRetryMax time.Duration
	// LocalRetryDurable writes the item's state before each local retry,
	// as before a delayed nak, rather than once as the delivery leaves
	// the agent: an agent that dies between two local retries then loses
	// no attempt from the count or the history (without it, up to three
	// failed runs), for one stored message per retry. Items under an
	// agent_timeout or a step retry_budget always do.
	LocalRetryDurable bool
	// LimitLease is how long a step's limit slot stays held when its
	// agent stops renewing it (renewed every third of it while the step
	// runs). Defaults to DefaultLimitLease (30s).
	LimitLease time.Duration
	// LimitWait is how long a run waits in the agent for its step's
	// limit before it waits outside the agent. Defaults to
	// DefaultLimitWait (1s).
	LimitWait time.Duration
	// WorkVerifier, when set, checks the coordinator's signature of every
	// work item (WorkItem.SignedBytes of internal/wire, for this agent's pool):
	// an item without one it verifies is refused (terminated without
	// running or reporting an outcome). An nkeys.KeyPair made with
	// nkeys.FromPublicKey from the key `fleetctl auth init` prints is
	// one. Defaults to nil: items are not checked.
	WorkVerifier Verifier
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Registerer receives the agent's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// TracerProvider records the agent's spans (docs/tracing.md); nil =
	// none. The W3C trace context in messages is passed on either way.
	TracerProvider trace.TracerProvider

	// hooks are the clock, random source, crash points and consumer
	// settings tests inject through internal/testhooks; zero (the system
	// clock, a seeded source, no crash points, default consumer settings)
	// otherwise.
	hooks testhooks.Agent
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
	if c.ResultBatch == 0 {
		c.ResultBatch = DefaultResultBatch
	}
	if c.ResultLinger == 0 {
		c.ResultLinger = DefaultResultLinger
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.ClaudeCommand == "" {
		c.ClaudeCommand = DefaultClaudeCommand
	}
	if c.ClaudeArgs == nil {
		c.ClaudeArgs = DefaultClaudeArgs
	}
	if c.KeepFailed == 0 {
		c.KeepFailed = DefaultKeepFailed
	}
	if c.KeepFailedBytes == 0 {
		c.KeepFailedBytes = DefaultKeepFailedBytes
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = DefaultStepTimeout
	}
	if c.Environ == nil {
		c.Environ = os.Environ
	}
	if c.PresenceInterval == 0 {
		c.PresenceInterval = DefaultPresenceInterval
	}
	if c.LimitLease == 0 {
		c.LimitLease = DefaultLimitLease
	}
	if c.LimitWait == 0 {
		c.LimitWait = DefaultLimitWait
	}
	if c.LocalRetryMax == 0 {
		c.LocalRetryMax = DefaultLocalRetryMax
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	c.hooks.Provision = c.hooks.Provision.WithDefaults()
	if c.hooks.Clock == nil {
		// The server's time: park deadlines, breaker and limit times are
		// read by other agents and by the server (docs/design.md, "Clocks").
		c.hooks.Clock = clock.NewServer(nil)
	}
	if c.hooks.Rand == nil {
		c.hooks.Rand = retry.DefaultRand
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
	if err := natsconn.ValidDomain(c.JSDomain); err != nil {
		errs = append(errs, fmt.Errorf("js_domain: %w", err))
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency: %d, want 1..%d", c.Concurrency, MaxConcurrency))
	}
	if c.Prefetch < 0 || c.Prefetch > MaxPrefetchFixed {
		errs = append(errs, fmt.Errorf("prefetch: %d, want 1..%d (or 0: adaptive)", c.Prefetch, MaxPrefetchFixed))
	}
	if c.ResultBatch < 1 || c.ResultBatch > MaxResultBatch {
		errs = append(errs, fmt.Errorf("result_batch: %d, want 1..%d", c.ResultBatch, MaxResultBatch))
	}
	if c.ResultLinger < 0 || c.ResultLinger > MaxResultLinger {
		errs = append(errs, fmt.Errorf("result_linger: %s, want 0..%s", c.ResultLinger, MaxResultLinger))
	}
	if c.Heartbeat < 0 {
		errs = append(errs, fmt.Errorf("heartbeat: %s, want >= 0", c.Heartbeat))
	}
	if c.PresenceInterval >= 0 && c.PresenceInterval < MinPresenceInterval {
		errs = append(errs, fmt.Errorf("presence_interval: %s, want >= %s (or negative: off)", c.PresenceInterval, MinPresenceInterval))
	}
	if c.LimitLease < MinLimitLease {
		errs = append(errs, fmt.Errorf("limit_lease: %s, want >= %s", c.LimitLease, MinLimitLease))
	}
	if c.LimitWait < 0 {
		errs = append(errs, fmt.Errorf("limit_wait: %s, want >= 0", c.LimitWait))
	}
	if c.ParkAfter >= 0 && c.ParkAfter < MinParkAfter {
		errs = append(errs, fmt.Errorf("park_after: %s, want >= %s (or negative: never park)", c.ParkAfter, MinParkAfter))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout: %s, want >= 0", c.ShutdownTimeout))
	}
	if c.KillGrace < 0 {
		errs = append(errs, fmt.Errorf("kill_grace: %s, want > 0", c.KillGrace))
	}
	if c.StepTimeout < 0 {
		errs = append(errs, fmt.Errorf("step_timeout: %s, want > 0", c.StepTimeout))
	}
	if _, err := shell.NewEnvFilter(c.StepEnv, c.StepEnvUnsafe); err != nil {
		errs = append(errs, fmt.Errorf("step_env: %w", err))
	}
	if _, err := httpstep.ParseAllow(c.HTTPAllow); err != nil {
		errs = append(errs, err)
	}
	if c.Reaper > ReaperAll {
		errs = append(errs, fmt.Errorf("reaper: unknown mode %d", c.Reaper))
	}
	return errors.Join(errs...)
}

func init() {
	testhooks.RegisterAgent(func(cfg any, fn func(*testhooks.Agent)) bool {
		c, ok := cfg.(*Config)
		if ok {
			fn(&c.hooks)
		}
		return ok
	})
}
