package messages

import "encoding/json"

// JobSpec is a job as submitted (docs/contract.md §3). Optional fields are
// pointers or zero values meaning "unset"; jobspec.WithDefaults fills them
// with the effective values the coordinator records. Read one with package
// jobspec (YAML or JSON), which validates it; jobspec.Validate checks one
// built in code.
type JobSpec struct {
	// ID identifies the job; resubmitting an id is idempotent. Optional: the
	// coordinator generates one. Must be a valid subject token.
	ID string `json:"id,omitempty"`
	// Name is a human label.
	Name string `json:"name,omitempty"`
	// Pool is the agent pool that runs the items. Defaults to "default".
	Pool string `json:"pool,omitempty"`
	// Team is the team that submitted the job, in a fleet shared by teams
	// (docs/security.md, "Teams"): set by the coordinator from the team's
	// API subject the job came through, never by a submitter. Only that
	// team (and operators) see the job.
	Team string `json:"team,omitempty"`
	// GroupBy is a template such as "${item.region}" that assigns each item
	// to a group for best-effort completion; items of group g are routed to
	// pool g when that pool exists. Defaults to one group.
	GroupBy string `json:"group_by,omitempty"`
	// Items are inline items: JSON objects (their "id" field, when present,
	// is the item id) or scalars. Mutually exclusive with Input.
	Items []json.RawMessage `json:"items,omitempty"`
	// Input names a JSON file holding the items: an object uploaded to the
	// uploads bucket ("objstore://<prefix>_uploads/<name>"; fleetctl submit
	// uploads a local file there), or a file in the coordinator's input
	// directory ("file://name" or a relative path; only when the
	// coordinator has one). The coordinator copies an upload to a bucket
	// only it writes when it accepts the job.
	Input string `json:"input,omitempty"`
	// InputDigest is the SHA-256 digest of an uploaded input, in the
	// object store's form "SHA-256=<base64url>". When set, the coordinator
	// accepts the job only if the upload it copies has this digest: nothing
	// done to the upload after it was made can change the job's items.
	// fleetctl submit sets it.
	InputDigest string `json:"input_digest,omitempty"`
	// JSONPath selects the items inside Input. Defaults to "$[*]".
	JSONPath string `json:"json_path,omitempty"`
	// IDField is the item field used as item id. Defaults to "id"; items
	// without it are identified by their index.
	IDField string `json:"id_field,omitempty"`
	// Filter keeps the items for which this expression (Prodigy's filter
	// grammar, docs/job-spec.md "Item selection") is true.
	Filter string `json:"filter,omitempty"`
	// SortBy orders the items: "field [ASC|DESC] [NULLS FIRST|LAST], ...".
	// Unset: input order.
	SortBy string `json:"sort_by,omitempty"`
	// Distinct keeps the first item of each value of this field path.
	Distinct string `json:"distinct,omitempty"`
	// Offset skips this many items (after filter, sort_by and distinct).
	Offset int `json:"offset,omitempty"`
	// MaxItems keeps at most this many items (after Offset). Unset: all.
	MaxItems *int `json:"max_items,omitempty"`
	// MaxParallel caps the job's in-flight items across the fleet. 0 = no cap.
	MaxParallel int `json:"max_parallel,omitempty"`
	// NotBefore holds the job until a time: an RFC 3339 time, or a duration
	// from its acceptance ("10m"). The coordinator stores the time it
	// resolves to; until then the job's state is "scheduled".
	NotBefore string `json:"not_before,omitempty"`
	// Priority orders the jobs of one pool: 0 (lowest) to 9 (highest).
	// A job of higher priority gets the larger share of the pool's work
	// queue (docs/jobs.md "Priorities"). Unset: DefaultPriority (5).
	Priority *int `json:"priority,omitempty"`
	// AgentTemplate are the steps run, in order, for every item.
	AgentTemplate []Step `json:"agent_template"`
	// AgentTimeout bounds the run of one item through AgentTemplate, from
	// the start of its first step run: run time, backoff delays, snoozes
	// and time parked all count, on whichever agents it runs. The item
	// fails (reason agent_timeout) when it is up. 0 = no bound.
	AgentTimeout Duration `json:"agent_timeout,omitempty"`
	// ErrorPolicy is the workflow-level failure handling.
	ErrorPolicy *ErrorPolicy `json:"error_policy,omitempty"`
	// RetryBudget is the job-level retry budget shared by all items: a count
	// or a percentage of the items. Unset = operator default; 0 = no retries.
	RetryBudget *BudgetValue `json:"retry_budget,omitempty"`
	// RetryBudgetPerItem caps the retries a single item may claim.
	RetryBudgetPerItem *BudgetValue `json:"retry_budget_per_item,omitempty"`
	// BestEffort enables completion with partial results over groups.
	BestEffort *BestEffort `json:"best_effort,omitempty"`
	// Setup runs once, before the map phase.
	Setup *Setup `json:"setup,omitempty"`
	// InputCommand is a shell command whose output is the job's items
	// (Prodigy's map.input naming a command): JSON read through JSONPath,
	// or else one item per line. Mutually exclusive with Items and Input.
	InputCommand string `json:"input_command,omitempty"`
	// Reduce steps run once, on one agent, after the map phase ends.
	Reduce []Step `json:"reduce,omitempty"`
	// Env is added to the environment of every shell step.
	Env map[string]string `json:"env,omitempty"`
	// EnvValues are env variables whose value the agent that runs an item
	// computes, by a command or a condition (Prodigy's env: {command} and
	// {condition}); docs/job-spec.md "Environments".
	EnvValues map[string]EnvValue `json:"env_values,omitempty"`
	// EnvFiles are .env files the agent reads, under its secret
	// directories, before Env applies (Prodigy's env_files). A missing
	// file is skipped.
	EnvFiles []string `json:"env_files,omitempty"`
	// Secrets are env variables the agent reads from its own environment
	// or from a file: only their source travels with the job, and their
	// values are masked in whatever a step's output becomes.
	Secrets map[string]Secret `json:"secrets,omitempty"`
	// Profiles are named sets of env values; Profile names the one that
	// applies, over Env (fleetctl run/submit --profile).
	Profiles map[string]Profile `json:"profiles,omitempty"`
	Profile  string             `json:"profile,omitempty"`
}

// EnvValue is an env variable computed by the agent: the output of
// Command (trimmed), or WhenTrue or WhenFalse as Condition holds.
type EnvValue struct {
	Command string `json:"command,omitempty"`
	// Cache runs Command once per agent for the job, not once per item.
	Cache     bool   `json:"cache,omitempty"`
	Condition string `json:"condition,omitempty"`
	WhenTrue  string `json:"when_true,omitempty"`
	WhenFalse string `json:"when_false,omitempty"`
}

// Secret says where the agent reads a secret: Provider "env" (Key is a
// variable of the agent's environment) or "file" (Key is a file path).
type Secret struct {
	Provider string `json:"provider"`
	Key      string `json:"key"`
}

// Profile is a named set of env values (Prodigy's profiles).
type Profile struct {
	Description string            `json:"description,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
}

// Step is one command of an item's template: exactly one of Shell,
// Claude, Handler or WriteFile.
type Step struct {
	// Name labels the step in logs and history. Defaults to "step-<n>".
	Name string `json:"name,omitempty"`
	// Shell is run with "sh -c"; ${item.field} values are shell-quoted.
	Shell string `json:"shell,omitempty"`
	// Claude is a prompt run by Claude Code's CLI in headless mode on an
	// agent that has it (Prodigy's claude: steps).
	Claude string `json:"claude,omitempty"`
	// Handler names a Go function registered on the agent.
	Handler string `json:"handler,omitempty"`
	// With are the arguments passed to Handler.
	With map[string]any `json:"with,omitempty"`
	// Timeout bounds one run of the step. 0 = no timeout.
	Timeout Duration `json:"timeout,omitempty"`
	// RetryConfig is the command-level retry policy. Unset = defaults
	// (3 attempts, exponential 1s..30s).
	RetryConfig *RetryConfig `json:"retry_config,omitempty"`
	// Limit names the fleet-wide rate and concurrency limit every run of
	// the step takes a token and a slot of (docs/limits.md).
	Limit *StepLimit `json:"limit,omitempty"`
	// WorkingDir is the directory the step runs in, relative to the item's
	// own directory (or absolute). Unset: the item's directory.
	WorkingDir string `json:"working_dir,omitempty"`
	// Env is added to this step's environment only, over the job's.
	Env map[string]string `json:"env,omitempty"`
	// ClearEnv leaves out the agent's own variables (its --step-env) from
	// this step's environment; the job's env and Env still apply.
	ClearEnv bool `json:"clear_env,omitempty"`
	// CommitRequired makes the step fail unless it leaves a new commit in
	// the item's directory, when that is a git checkout (Prodigy's
	// commit_required).
	CommitRequired bool `json:"commit_required,omitempty"`
	// Capture names a variable set from the step's output when the step
	// succeeds (Prodigy's capture:); later steps of the item read it as
	// ${NAME}, ${NAME.field} and, with CaptureStreams, ${NAME.exit_code}.
	Capture string `json:"capture,omitempty"`
	// CaptureFormat reads the output: string (the default), number, json,
	// lines or boolean.
	CaptureFormat string `json:"capture_format,omitempty"`
	// CaptureStreams picks what the capture holds. Unset: stdout only.
	CaptureStreams *CaptureStreams `json:"capture_streams,omitempty"`
	// When is a condition over the item and the captured variables
	// (internal/expr's grammar, ${...} around the paths allowed); the step
	// is skipped when it is false.
	When string `json:"when,omitempty"`
	// OnSuccess is a shell command run after the step succeeds, in its
	// directory, where ${shell.output} is the step's output (Prodigy's
	// on_success: {shell: ...}). When it fails, the step has failed, under
	// its retry_config.
	OnSuccess string `json:"on_success,omitempty"`
	// WriteFile writes a file in the item's directory, without a shell
	// (Prodigy's write_file:).
	WriteFile *WriteFile `json:"write_file,omitempty"`
	// Foreach runs its Do steps once per element of a list or of a
	// command's output lines, in the item's directory (Prodigy's
	// foreach:). Agents announce CapabilityForeach.
	Foreach *Foreach `json:"foreach,omitempty"`
	// OnExitCode are steps (shell or claude) run after the step when its
	// command exits with the key's code (Prodigy's on_exit_code; keys are
	// decimal codes). The step's outcome stays its own, except that a
	// handler that fails fails the step.
	OnExitCode map[string]Step `json:"on_exit_code,omitempty"`
}

// Foreach is a foreach step: Do runs for each element, where ${item} is
// the element, ${index} its 0-based position and ${total} the number of
// elements (docs/job-spec.md).
type Foreach struct {
	// Items are the elements; or Command, a shell command whose non-empty
	// output lines are, run in the item's directory.
	Items   []string `json:"items,omitempty"`
	Command string   `json:"command,omitempty"`
	// Do are the steps run for each element, in order, once each.
	Do []Step `json:"do"`
	// Parallel is how many elements run at a time. Unset or 1: one.
	Parallel int `json:"parallel,omitempty"`
	// ContinueOnError runs every element when one fails; the step fails
	// after them if any did. Unset: the first failure ends the step.
	ContinueOnError bool `json:"continue_on_error,omitempty"`
	// MaxItems keeps the first MaxItems elements. Unset: all.
	MaxItems int `json:"max_items,omitempty"`
}

// WriteFile is a write_file step: Content, its ${...} references expanded
// as they are, is written to Path, relative to the item's directory and
// never out of it (docs/job-spec.md).
type WriteFile struct {
	// Path is the file, relative to the item's directory; ${...} allowed.
	Path string `json:"path"`
	// Content is written; ${...} allowed. Over 1 MiB, the step fails.
	Content string `json:"content"`
	// Format is text (the default), json or yaml: json and yaml content is
	// parsed before anything is written, and written indented.
	Format string `json:"format,omitempty"`
	// Mode is the file's octal mode, such as "0644" (the default).
	Mode string `json:"mode,omitempty"`
	// CreateDirs makes the file's missing parent directories.
	CreateDirs bool `json:"create_dirs,omitempty"`
}

// CaptureStreams are the streams a step's capture holds (Prodigy's
// capture_streams).
type CaptureStreams struct {
	// Stdout is the value, read in capture_format. Unset: true.
	Stdout *bool `json:"stdout,omitempty"`
	// Stderr, ExitCode, Success and Duration (seconds) are read as
	// ${NAME.stderr}, ${NAME.exit_code}, ${NAME.success}, ${NAME.duration}.
	Stderr   bool `json:"stderr,omitempty"`
	ExitCode bool `json:"exit_code,omitempty"`
	Success  bool `json:"success,omitempty"`
	Duration bool `json:"duration,omitempty"`
}

// Setup is a job's setup phase: steps run once, before any item, on one
// agent of the job's pool (Prodigy's setup:).
type Setup struct {
	// Commands are the steps, run in order.
	Commands []Step `json:"commands"`
	// Timeout bounds the whole phase. 0 = no bound.
	Timeout Duration `json:"timeout,omitempty"`
	// CaptureOutputs names variables set from the steps' output
	// (Prodigy's capture_outputs).
	CaptureOutputs map[string]any `json:"capture_outputs,omitempty"`
}

// Retry-config defaults (docs/contract.md §4): what an unset field means.
// jobspec.WithDefaults fills them in.
const (
	DefaultAttempts     = 3
	DefaultInitialDelay = Duration(1e9)  // 1s
	DefaultMaxDelay     = Duration(30e9) // 30s
	DefaultJitterFactor = 0.3
	DefaultExpBase      = 2.0
	// MaxAttempts bounds retry_config.attempts and error_policy.retry_config.max_attempts.
	MaxAttempts = 10000
)

// DefaultJSONPath selects the items of an input file when json_path is unset.
const DefaultJSONPath = "$[*]"

// Circuit-breaker defaults, used when error_policy.circuit_breaker is set.
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerSuccessThreshold = 3
	DefaultBreakerTimeout          = Duration(30e9) // 30s
	DefaultBreakerHalfOpenRequests = 3
)

// DefaultMinGroups is best_effort.min_groups when unset.
const DefaultMinGroups = 1

// RetryConfig is a step's command-level retry policy.
type RetryConfig struct {
	// Attempts is the total number of runs including the first. Defaults to 3.
	Attempts *int `json:"attempts,omitempty"`
	// Backoff picks the delay strategy. Defaults to exponential, base 2.
	Backoff *Backoff `json:"backoff,omitempty"`
	// InitialDelay is I in the backoff formulas. Defaults to 1s.
	InitialDelay *Duration `json:"initial_delay,omitempty"`
	// MaxDelay caps every delay. Defaults to 30s.
	MaxDelay *Duration `json:"max_delay,omitempty"`
	// Jitter randomises delays. Defaults to false.
	Jitter bool `json:"jitter,omitempty"`
	// JitterFactor is the proportional jitter width. Defaults to 0.3.
	JitterFactor *float64 `json:"jitter_factor,omitempty"`
	// JitterMode is proportional (default), full, equal or decorrelated.
	JitterMode JitterMode `json:"jitter_mode,omitempty"`
	// RetryOn restricts retries to matching errors. Empty = all errors retry.
	RetryOn []Matcher `json:"retry_on,omitempty"`
	// RetryBudget bounds the cumulative backoff delay of the step.
	RetryBudget *Duration `json:"retry_budget,omitempty"`
	// CircuitBreaker is the step's own circuit breaker, shared by the fleet
	// (one per job and step): while it is open the step fails fast, without
	// running (reason circuit_open), and its on_failure applies. Unset = none.
	CircuitBreaker *CircuitBreakerConfig `json:"circuit_breaker,omitempty"`
	// OnFailure is what happens when the step gives up. Defaults to stop.
	OnFailure *OnFailure `json:"on_failure,omitempty"`
}

// JitterMode selects how jitter is applied.
type JitterMode string

// Jitter modes. Proportional is uniform in d·(1±factor); the others are the
// AWS architecture blog's full, equal and decorrelated jitter.
const (
	JitterProportional JitterMode = "proportional"
	JitterFull         JitterMode = "full"
	JitterEqual        JitterMode = "equal"
	JitterDecorrelated JitterMode = "decorrelated"
)

// BackoffKind names a backoff strategy.
type BackoffKind string

// Backoff strategies.
const (
	BackoffFixed       BackoffKind = "fixed"
	BackoffLinear      BackoffKind = "linear"
	BackoffExponential BackoffKind = "exponential"
	BackoffFibonacci   BackoffKind = "fibonacci"
	BackoffCustom      BackoffKind = "custom"
)

// Backoff is a strategy and its parameters. In JSON/YAML it is either the
// strategy name ("fibonacci") or an object with one key naming the strategy:
//
//	{exponential: {base: 3}}
//	{linear: {increment: 2s}}
//	{custom: {delays: [1s, {secs: 3, nanos: 0}]}}
//	{fixed: {delay: 2s}}                       # legacy error_policy forms:
//	{exponential: {initial: 1s, multiplier: 2}}
type Backoff struct {
	Kind BackoffKind
	// Base of exponential backoff. Defaults to 2.0 (Multiplier is its legacy name).
	Base float64
	// Increment of linear backoff. Defaults to InitialDelay.
	Increment *Duration
	// Delays of custom backoff; max_delay is used past the end.
	Delays []Duration
	// Initial (legacy `initial`, or `delay` for fixed) overrides initial_delay.
	Initial *Duration
}

// Error classes recognised by the built-in matchers.
const (
	MatchNetwork     = "network"
	MatchTimeout     = "timeout"
	MatchServerError = "server_error"
	MatchRateLimit   = "rate_limit"
)

// Matcher selects retryable errors: a built-in class name, {pattern: regex}
// or {exit_code: [codes]}.
type Matcher struct {
	Builtin   string
	Pattern   string
	ExitCodes []int
}

// Failure actions of a step.
const (
	OnFailureStop     = "stop"
	OnFailureContinue = "continue"
	OnFailureFallback = "fallback"
)

// OnFailure is "stop", "continue", {fallback: {command: "..."}} or
// {fallback: {claude: "..."}}.
type OnFailure struct {
	Action   string
	Fallback string
	// Claude: Fallback is a prompt for Claude Code's CLI, run as a claude
	// step is (Prodigy's on_failure: {claude: "..."}), not a shell command.
	Claude bool
	// CommitRequired: the fallback fails unless it leaves a new commit, as
	// a step's commit_required.
	CommitRequired bool
	// FailWorkflow: the step fails after its fallback runs, whatever the
	// fallback's outcome (Prodigy's on_failure with fail_workflow: true).
	FailWorkflow bool
	// Steps, instead of Fallback: shell and claude steps run in turn,
	// stopping at the first that fails (Prodigy's list of handler
	// commands with a claude command in it).
	Steps []Step
	// MaxAttempts above 1 runs the step up to that many times in one
	// delivery, the fallback after each failed run (Prodigy's on_failure
	// max_attempts: fix, then check the fix): the step succeeds when a
	// run does; after its last failed run the fallback's outcome decides
	// as above. Defaults to 1: the fallback runs once, when the step
	// gives up. Agents announce CapabilityFallbackRuns.
	MaxAttempts int
	// HandlerFailureFatal: a failed fallback between runs ends the
	// reruns, and the step gives up at once (Prodigy's
	// handler_failure_fatal); otherwise the step runs again.
	HandlerFailureFatal bool
	// Timeout bounds each run of the fallback instead of the step's
	// timeout. Defaults to the step's.
	Timeout Duration
}

// Item failure actions of the workflow error policy.
const (
	ItemFailureDLQ    = "dlq"
	ItemFailureRetry  = "retry"
	ItemFailureSkip   = "skip"
	ItemFailureStop   = "stop"
	ItemFailureCustom = "custom"
)

// ErrorPolicy is the workflow-level failure handling of a job.
type ErrorPolicy struct {
	// OnItemFailure is dlq (default), retry, skip, stop or {custom: step}.
	OnItemFailure *ItemFailureAction `json:"on_item_failure,omitempty"`
	// ContinueOnFailure=false stops the job at its first failed item. Defaults to true.
	ContinueOnFailure *bool `json:"continue_on_failure,omitempty"`
	// MaxFailures stops the job when failures >= N.
	MaxFailures *int `json:"max_failures,omitempty"`
	// FailureThreshold stops the job when the failure rate exceeds it after
	// at least 10 finished items. In (0, 1].
	FailureThreshold *float64 `json:"failure_threshold,omitempty"`
	// ErrorCollection is aggregate (default), immediate or {batched: {size: N}}.
	ErrorCollection *ErrorCollection `json:"error_collection,omitempty"`
	// CircuitBreaker is shared by the fleet through KV.
	CircuitBreaker *CircuitBreakerConfig `json:"circuit_breaker,omitempty"`
	// RetryConfig is used by on_item_failure: retry.
	RetryConfig *WorkflowRetryConfig `json:"retry_config,omitempty"`
}

// ItemFailureAction is one of the ItemFailure* actions; Custom holds the
// step (a handler or a shell command) run with the failed item for "custom".
type ItemFailureAction struct {
	Action string
	Custom *Step
}

// Error collection modes.
const (
	CollectAggregate = "aggregate"
	CollectImmediate = "immediate"
	CollectBatched   = "batched"
)

// ErrorCollection is "aggregate", "immediate" or {batched: {size: N}}.
type ErrorCollection struct {
	Mode      string
	BatchSize int
}

// CircuitBreakerConfig configures the fleet-wide breaker of a job.
type CircuitBreakerConfig struct {
	// FailureThreshold consecutive failures open the breaker. Defaults to 5.
	FailureThreshold int `json:"failure_threshold,omitempty"`
	// SuccessThreshold successes in half-open close it. Defaults to 3.
	SuccessThreshold int `json:"success_threshold,omitempty"`
	// Timeout is how long it stays open. Defaults to 30s.
	Timeout Duration `json:"timeout,omitempty"`
	// HalfOpenRequests probes are admitted while half-open. Defaults to 3.
	HalfOpenRequests int `json:"half_open_requests,omitempty"`
}

// WorkflowRetryConfig is the simpler retry config of error_policy, used to
// re-run a whole item (on_item_failure: retry).
type WorkflowRetryConfig struct {
	// MaxAttempts is the total number of whole-item runs. Defaults to 3.
	MaxAttempts  *int      `json:"max_attempts,omitempty"`
	Backoff      *Backoff  `json:"backoff,omitempty"`
	InitialDelay *Duration `json:"initial_delay,omitempty"`
	MaxDelay     *Duration `json:"max_delay,omitempty"`
	Jitter       bool      `json:"jitter,omitempty"`
	JitterFactor *float64  `json:"jitter_factor,omitempty"`
}

// BudgetValue is a retry-budget setting: a count, or a percentage of the
// job's items ("10%").
type BudgetValue struct {
	Count     int
	Percent   float64
	IsPercent bool
}

// Late-result policies of best-effort jobs.
const (
	LateResultsLog    = "log"
	LateResultsUpdate = "update"
	// LateResultsLogOnly and LateResultsUpdateResult are AD-44's names of
	// log and update, accepted as aliases (jobspec.WithDefaults records
	// the canonical name).
	LateResultsLogOnly      = "log_only"
	LateResultsUpdateResult = "update_result"
)

// BestEffort lets a job complete with partial results over its groups.
type BestEffort struct {
	// MinGroups is how many groups must complete for success. Defaults to
	// the operator's default, 1 out of the box; clamped to [1, groups].
	MinGroups int `json:"min_groups,omitempty"`
	// Deadline completes the job with what it has, that long after it was
	// accepted. Unset (0): the operator's default, 5m out of the box
	// (AD-44's 300 s); it may be clamped to the operator's maximum.
	Deadline Duration `json:"deadline,omitempty"`
	// LateResults is log (default) or update; AD-44's log_only and
	// update_result are accepted for them.
	LateResults string `json:"late_results,omitempty"`
}

// Bounds and default of JobSpec.Priority.
const (
	MinPriority     = 0
	MaxPriority     = 9
	DefaultPriority = 5
)
