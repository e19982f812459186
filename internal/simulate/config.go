package simulate

import (
	"fmt"
	"math"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/itemrun"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Defaults and bounds of Config.
const (
	// DefaultAgents is the number of agents.
	DefaultAgents = 1
	// DefaultConcurrency is the items one agent runs at once, as the agent's.
	DefaultConcurrency = agent.DefaultConcurrency
	// DefaultMaxDeliver is the work consumer's MaxDeliver, as provisioned.
	DefaultMaxDeliver = provision.DefaultMaxDeliver
	// DefaultMaxAckPending is the work consumer's MaxAckPending, as provisioned.
	DefaultMaxAckPending = provision.DefaultMaxAckPending
	// DefaultLocalRetryMax is the agents' local retry bound, as the agent's.
	DefaultLocalRetryMax = agent.DefaultLocalRetryMax
	// DefaultStepDuration is how long a step run takes.
	DefaultStepDuration = 200 * time.Millisecond
	// DefaultError is the message of a failed call to the dependency, and
	// DefaultRateLimitError that of a failure with a Retry-After.
	DefaultError          = "503 Service Unavailable"
	DefaultRateLimitError = "429 Too Many Requests"
	// DefaultExitCode is the exit status of a failed shell step.
	DefaultExitCode = 1
	// DefaultBucket is the width of the time series.
	DefaultBucket = time.Second
	// DefaultHorizon bounds the simulated time.
	DefaultHorizon = 30 * 24 * time.Hour
	// DefaultMaxEvents bounds the events of a run (about a minute of work).
	DefaultMaxEvents = 500_000_000

	// MaxItems bounds Config.Items (about 70 bytes of state each).
	MaxItems = 10_000_000
	// MaxSteps bounds the steps of a simulated job.
	MaxSteps = 1 << 15
	// MaxSlots bounds Agents × Concurrency.
	MaxSlots = 1_000_000
	// MaxBuckets bounds the length of the time series: a longer run widens
	// its buckets.
	MaxBuckets = 1 << 16
)

// Config is one simulation: a job, the fleet that runs it, and what happens
// to the dependency its failing step calls. The zero value of every field
// but Spec and Items is usable: WithDefaults fills it. A Config is a plain
// value; Run does not modify it (nor its Spec), so one may be shared by
// concurrent runs.
type Config struct {
	// Spec is the job as parsed (package jobspec). Its defaults are applied
	// as the coordinator applies them.
	Spec *messages.JobSpec
	// Items is the number of the job's items (their content plays no part).
	Items int64
	// Budget are the operator's retry-budget settings, as the coordinator's
	// (RETRY_BUDGET_DEFAULT, ...). Defaults to the out-of-the-box values.
	Budget budget.Settings
	// BestEffort are the operator's best-effort defaults and cap, as the
	// coordinator's (BEST_EFFORT_DEADLINE_DEFAULT, ...): a best_effort
	// block without a deadline completes 5m in, out of the box.
	BestEffort jobspec.BestEffortSettings
	// Fleet is the agents and the work consumer.
	Fleet Fleet
	// Dependency is the downstream and its outage.
	Dependency Dependency
	// Limit configures the limit the dependency's step names with
	// `limit: NAME` (docs/limits.md); a step's inline limit brings its
	// own configuration, and one with a key is modelled as a single limit
	// (the simulated items have no content). Ignored when the step names
	// no limit.
	Limit messages.LimitConfig
	// Seed seeds every random draw (jitter, park spread, partial error
	// rates): the same Config gives the same Result.
	Seed uint64
	// Bucket is the width of the time series. Defaults to 1s; a run longer
	// than MaxBuckets buckets doubles it as often as needed.
	Bucket time.Duration
	// Horizon bounds the simulated time; a run still going then stops with
	// Result.Truncated. Defaults to 30 days.
	Horizon time.Duration
	// MaxEvents bounds the run's events (deliveries, step runs, due
	// redeliveries), so that a pathological setting — MaxDeliver -1 and a
	// breaker parking items through a month-long outage — ends with
	// Result.Truncated instead of running for hours. Defaults to 500,000,000.
	MaxEvents int64
}

// Fleet is the agents that run the job and the work consumer they share. It
// is a plain value.
type Fleet struct {
	// Agents is the number of agents. Defaults to 1.
	Agents int
	// Concurrency is the items each agent runs at once. Defaults to 8.
	Concurrency int
	// Prefetch is the agent's buffer of work messages (Config.Prefetch):
	// it pulls what the buffer lacks once the buffer is half empty.
	// Defaults to what an agent's adaptive prefetch settles at for the
	// dependency's StepDuration (itemrun.AdaptivePrefetch).
	Prefetch int
	// MaxDeliver is the consumer's MaxDeliver: on that delivery the agent
	// gives up rather than nak (reason max_deliveries) and runs the item even
	// if the breaker would park it. Defaults to 100; -1 = unlimited.
	MaxDeliver int
	// MaxAckPending is the consumer's MaxAckPending: the server delivers no
	// new message while that many are unacknowledged (running, buffered or
	// waiting out a delayed nak). Defaults to 20000; -1 = unlimited.
	MaxAckPending int
	// LimitWait is how long a run waits in its agent for its step's limit
	// before the item waits outside (a delayed nak), as the agent's
	// Config.LimitWait. Defaults to 1s.
	LimitWait time.Duration
	// LocalRetryMax is the longest retry delay the agent waits out itself
	// before it runs the item again, as the agent's Config.LocalRetryMax.
	// Defaults to 1s; negative: every retry is a delayed nak.
	LocalRetryMax time.Duration
	// AckWait is the consumer's AckWait: a local retry is due within a
	// third of it of its delivery (agent crashes are not modelled).
	// Defaults to 30s.
	AckWait time.Duration
}

// Dependency is the downstream called by one step of the job, and what goes
// wrong with it. Outside [OutageAt, OutageAt+Outage+Ramp) every call
// succeeds in StepDuration. Times are from the start of the job. It is a
// plain value.
type Dependency struct {
	// Step is the index of the step that calls the dependency (the other
	// steps always succeed). Defaults to 0, the first.
	Step int
	// StepDuration is how long a run of any step takes. Defaults to 200ms.
	StepDuration time.Duration
	// FailDuration is how long a failed call takes. Defaults to
	// StepDuration.
	FailDuration time.Duration
	// OutageAt is when the outage begins.
	OutageAt time.Duration
	// Outage is how long it lasts. 0 = no outage.
	Outage time.Duration
	// ErrorRate is the probability that a call made during the outage
	// fails, in [0, 1]. 0 = calls do not fail (a slow dependency only).
	ErrorRate float64
	// Ramp is the recovery after the outage: the error rate (and Slow) fall
	// linearly to nothing over it. 0 = an abrupt recovery.
	Ramp time.Duration
	// Slow is how long a call made during the outage takes, failed or not
	// (0 = as usual). A step timeout shorter than it cuts the call: the run
	// fails as timed out, after the timeout.
	Slow time.Duration
	// Error is the message of a failed call, matched by the step's retry_on
	// like a real one. Defaults to "503 Service Unavailable", or "429 Too
	// Many Requests" with RetryAfter.
	Error string
	// ExitCode is the exit status of a failed run of a shell step (matched
	// by exit_code matchers). Defaults to 1.
	ExitCode int
	// RetryAfter, when set, makes every failure a 429 whose handler returns
	// retry.After(RetryAfter, err): the delay is the server's, not the
	// backoff's. Go handler steps only.
	RetryAfter time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	f := &c.Fleet
	if f.Agents == 0 {
		f.Agents = DefaultAgents
	}
	if f.Concurrency == 0 {
		f.Concurrency = DefaultConcurrency
	}
	if f.Prefetch == 0 && f.Concurrency > 0 {
		d := c.Dependency.StepDuration
		if d == 0 {
			d = DefaultStepDuration
		}
		f.Prefetch = itemrun.AdaptivePrefetch(f.Concurrency, d)
	}
	if f.MaxDeliver == 0 {
		f.MaxDeliver = DefaultMaxDeliver
	}
	if f.MaxAckPending == 0 {
		f.MaxAckPending = DefaultMaxAckPending
	}
	if f.LimitWait == 0 {
		f.LimitWait = agent.DefaultLimitWait
	}
	if f.LocalRetryMax == 0 {
		f.LocalRetryMax = DefaultLocalRetryMax
	}
	if f.AckWait == 0 {
		f.AckWait = provision.DefaultAckWait
	}
	d := &c.Dependency
	if d.StepDuration == 0 {
		d.StepDuration = DefaultStepDuration
	}
	if d.FailDuration == 0 && d.StepDuration > 0 {
		d.FailDuration = d.StepDuration
	}
	switch {
	case d.Error != "":
	case d.RetryAfter > 0:
		d.Error = DefaultRateLimitError
	default:
		d.Error = DefaultError
	}
	if d.ExitCode == 0 {
		d.ExitCode = DefaultExitCode
	}
	if c.Bucket == 0 {
		c.Bucket = DefaultBucket
	}
	if c.Horizon == 0 {
		c.Horizon = DefaultHorizon
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	return c
}

// Validate reports every invalid field of c (after WithDefaults), each with
// its path ("fleet.agents", "dependency.error_rate") and bound, in a
// *messages.ValidationError of Kind "simulation".
func (c Config) Validate() error {
	var v problems
	switch {
	case c.Spec == nil:
		v.add("spec", "a job spec is required")
	case len(c.Spec.AgentTemplate) == 0:
		v.add("spec.agent_template", "the job has no steps")
	case len(c.Spec.AgentTemplate) > MaxSteps:
		v.add("spec.agent_template", "at most %d steps can be simulated, got %d", MaxSteps, len(c.Spec.AgentTemplate))
	}
	if c.Items < 1 || c.Items > MaxItems {
		v.add("items", "must be in [1, %d], got %d", MaxItems, c.Items)
	}
	if err := c.Budget.Validate(); err != nil {
		v.add("budget", "%v", err)
	}
	if err := c.BestEffort.Validate(); err != nil {
		v.add("best_effort", "%v", err)
	}
	f := c.Fleet
	if f.Agents < 1 {
		v.add("fleet.agents", "must be >= 1, got %d", f.Agents)
	}
	if f.Concurrency < 1 || f.Concurrency > agent.MaxConcurrency {
		v.add("fleet.concurrency", "must be in [1, %d], got %d", agent.MaxConcurrency, f.Concurrency)
	}
	if f.Agents >= 1 && f.Concurrency >= 1 && int64(f.Agents)*int64(f.Concurrency) > MaxSlots {
		v.add("fleet.agents", "agents × concurrency must be <= %d, got %d", MaxSlots, int64(f.Agents)*int64(f.Concurrency))
	}
	if f.Prefetch < 1 || f.Prefetch > MaxSlots {
		v.add("fleet.prefetch", "must be in [1, %d], got %d", MaxSlots, f.Prefetch)
	}
	if f.MaxDeliver < -1 {
		v.add("fleet.max_deliver", "must be >= 1, or -1 for unlimited, got %d", f.MaxDeliver)
	}
	if f.MaxAckPending < -1 {
		v.add("fleet.max_ack_pending", "must be >= 1, or -1 for unlimited, got %d", f.MaxAckPending)
	}
	if f.LimitWait < 0 {
		v.add("fleet.limit_wait", "must not be negative, got %s", messages.Duration(f.LimitWait))
	}
	d := c.Dependency
	if c.Spec != nil && (d.Step < 0 || d.Step >= max(len(c.Spec.AgentTemplate), 1)) {
		v.add("dependency.step", "must be a step of agent_template, in [0, %d], got %d", len(c.Spec.AgentTemplate)-1, d.Step)
	}
	nonNeg := func(field string, x time.Duration) {
		if x < 0 {
			v.add(field, "must not be negative, got %s", messages.Duration(x))
		}
	}
	positive := func(field string, x time.Duration) {
		if x <= 0 {
			v.add(field, "must be greater than 0, got %s", messages.Duration(x))
		}
	}
	positive("dependency.step_duration", d.StepDuration)
	if d.StepDuration > 0 { // else FailDuration has no default to take
		positive("dependency.fail_duration", d.FailDuration)
	}
	nonNeg("dependency.outage_at", d.OutageAt)
	nonNeg("dependency.outage", d.Outage)
	nonNeg("dependency.ramp", d.Ramp)
	nonNeg("dependency.slow", d.Slow)
	nonNeg("dependency.retry_after", d.RetryAfter)
	if !(d.ErrorRate >= 0 && d.ErrorRate <= 1) || math.IsNaN(d.ErrorRate) {
		v.add("dependency.error_rate", "must be in [0, 1], got %v", d.ErrorRate)
	}
	if d.ExitCode < 1 || d.ExitCode > 255 {
		v.add("dependency.exit_code", "must be in [1, 255], got %d", d.ExitCode)
	}
	if d.RetryAfter > 0 && c.Spec != nil && d.Step >= 0 && d.Step < len(c.Spec.AgentTemplate) &&
		c.Spec.AgentTemplate[d.Step].Shell != "" {
		v.add("dependency.retry_after", "step %d is a shell step: only a Go handler can return retry.After", d.Step)
	}
	positive("bucket", c.Bucket)
	positive("horizon", c.Horizon)
	if c.MaxEvents < 1 {
		v.add("max_events", "must be >= 1, got %d", c.MaxEvents)
	}
	return v.err()
}

// problems collects field errors.
type problems []messages.FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, messages.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &messages.ValidationError{Kind: KindSimulation, Problems: p}
}

// KindSimulation is the Kind of the *messages.ValidationError of an
// invalid Config.
const KindSimulation = "simulation"
