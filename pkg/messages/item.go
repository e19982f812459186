package messages

import (
	"encoding/json"
	"time"
)

// PhaseReduce marks the reduce item and its result.
const PhaseReduce = "reduce"

// ReduceItemID is the item id of a job's reduce item.
const ReduceItemID = "_reduce"

// PhaseSetup marks a job's setup item and its result, and a job whose
// setup phase runs (JobStatus.Phase): Prodigy's setup steps and map.input
// commands, run once on an agent of the job's pool before any item is
// published (docs/job-spec.md, "The setup phase").
const PhaseSetup = "setup"

// SetupItemID is the item id of a job's setup item.
const SetupItemID = "_setup"

// SetupOutput is what a setup item's result carries back to the
// coordinator: the text of the file the setup left at the job's input
// (or the input command's items, as a JSON array), from which the
// coordinator expands the job's items, and the variables the setup
// captured.
type SetupOutput struct {
	// Items is the input's text (unset when the job's items are not the
	// setup's: inline items, or an uploaded input).
	Items string `json:"items,omitempty"`
	// Captures are the variables the setup steps captured (capture:), as
	// a JSON object of name to captured value and streams: the map and
	// reduce steps read them as they read an earlier step's. Unset when
	// the setup captured nothing.
	Captures json.RawMessage `json:"captures,omitempty"`
}

// ReduceInput is what the reduce steps see: ${map.results} is a local file
// holding the object ResultsObject of the inputs object store, and
// ${map.successful} / ${map.failed} are the counts.
type ReduceInput struct {
	// ResultsObject names the JSON file of per-item outputs in the
	// inputs object store.
	ResultsObject string `json:"results_object"`
	Successful    int64  `json:"successful"`
	Failed        int64  `json:"failed"`
	// Items is the job's item count; DeadLettered, Skipped and NotRun
	// complete the picture for reduce commands that want it.
	Items        int64 `json:"items"`
	DeadLettered int64 `json:"dead_lettered"`
	Skipped      int64 `json:"skipped"`
	NotRun       int64 `json:"not_run"`
}

// MapOutput is one entry of the ${map.results} file.
type MapOutput struct {
	ItemID  string `json:"item_id"`
	Index   int64  `json:"index"`
	Group   string `json:"group,omitempty"`
	Outcome string `json:"outcome"`
	// Output is the last step's stdout tail or handler return value.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Attempt is one failed (or final) run of an item's step.
type Attempt struct {
	// Attempt is the 1-based attempt number of the step.
	Attempt    int       `json:"attempt"`
	Step       int       `json:"step"`
	StepName   string    `json:"step_name,omitempty"`
	Agent      string    `json:"agent,omitempty"`
	Time       time.Time `json:"time"`
	DurationMS int64     `json:"duration_ms"`
	// ErrorClass is the built-in class of the error (network, timeout,
	// server_error, rate_limit) or "error".
	ErrorClass string `json:"error_class,omitempty"`
	Message    string `json:"message,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	// Decision is what followed: retry, snooze, give_up, continue,
	// fallback, or rerun (the step's fallback ran and the step ran again
	// in the same delivery: OnFailure.MaxAttempts).
	Decision string `json:"decision,omitempty"`
	// DelayMS is the backoff chosen after this attempt, when retrying.
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Generation is the work-message generation the attempt ran under.
	Generation int `json:"generation,omitempty"`
	// ItemRun is the whole-item run the attempt belongs to (1-based), in
	// jobs whose error_policy.retry_config re-runs failed items; 0 in
	// others.
	ItemRun int `json:"item_run,omitempty"`
	// NotRun marks a step that gave up without running: its circuit
	// breaker was open (reason circuit_open), or the item's agent_timeout
	// was up (agent_timeout). It is not counted as a run.
	NotRun bool `json:"not_run,omitempty"`
}

// Item outcomes.
const (
	OutcomeSucceeded    = "succeeded"
	OutcomeFailed       = "failed"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeSkipped      = "skipped"
	OutcomeNotRun       = "not_run"
	// OutcomeReopened is not an outcome but a marker on the results stream,
	// written by a DLQ replay before it republishes an item: the item's
	// earlier outcome no longer counts and generation Generation is coming.
	OutcomeReopened = "reopened"
)

// Give-up reasons.
const (
	ReasonAttempts           = "attempts"
	ReasonRetryBudget        = "retry_budget"
	ReasonNotRetryable       = "not_retryable"
	ReasonPermanent          = "permanent"
	ReasonItemBudget         = "item_budget_exhausted"
	ReasonJobBudget          = "job_budget_exhausted"
	ReasonMaxDeliveries      = "max_deliveries"
	ReasonPoison             = "poison"
	ReasonUnknownHandler     = "unknown_handler"
	ReasonJobGone            = "job_not_found"
	ReasonItemRetryExhausted = "item_retries"
	// ReasonCustomFailed: the on_item_failure custom step failed too, so
	// the item was dead-lettered after all.
	ReasonCustomFailed = "custom_failed"
	// ReasonCircuitOpen: the step's own circuit breaker
	// (retry_config.circuit_breaker) was open, so the step failed fast,
	// without running.
	ReasonCircuitOpen = "circuit_open"
	// ReasonAgentTimeout: the item's run outlasted the job's agent_timeout
	// (run time and backoff delays together).
	ReasonAgentTimeout = "agent_timeout"
	// ReasonBadSignature: the pool's agents refused the work message, its
	// signature not verifying with their work verify key: the
	// coordinator's signing key and the agents' verify key are not a pair,
	// or the message was not sent by the coordinator.
	ReasonBadSignature = "bad_signature"
	// ReasonSetupInput: a setup item's steps succeeded, but the input
	// they were to leave (the file map.input names, or the input
	// command's output) is missing or larger than a result can carry.
	ReasonSetupInput = "setup_input"
)

// Result is the outcome of one item run, on fleet.results.<job>.
type Result struct {
	// V is the schema version (docs/contract.md §8).
	V      Schema `json:"v"`
	JobID  string `json:"job_id"`
	ItemID string `json:"item_id"`
	Index  int64  `json:"index"`
	Group  string `json:"group,omitempty"`
	// Outcome is succeeded, failed, dead_lettered or skipped.
	Outcome    string `json:"outcome"`
	Generation int    `json:"generation"`
	// Attempts is the number of step runs the item took in this generation.
	Attempts int `json:"attempts"`
	// Retries is the number of retries (redeliveries after a failure).
	Retries int `json:"retries"`
	// ItemRuns is the number of whole-item runs the item took, in jobs
	// whose error_policy.retry_config re-runs failed items; 0 in others.
	ItemRuns int `json:"item_runs,omitempty"`
	// Reason is why the item gave up (Reason* constants).
	Reason     string `json:"reason,omitempty"`
	Error      string `json:"error,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	Signature  string `json:"signature,omitempty"`
	// Output is the last step's stdout tail or handler return value.
	Output string `json:"output,omitempty"`
	// Phase is PhaseReduce for the reduce item's result, PhaseSetup for
	// the setup item's.
	Phase string `json:"phase,omitempty"`
	// Setup is what a succeeded setup item produced.
	Setup      *SetupOutput `json:"setup,omitempty"`
	Agent      string       `json:"agent,omitempty"`
	FinishedAt time.Time    `json:"finished_at"`
	DurationMS int64        `json:"duration_ms"`
	// Steps breaks the run down by step, for items of jobs with more than
	// one step (with one, Attempts and DurationMS say it all).
	Steps []StepRun `json:"steps,omitempty"`
}

// StepRun is what one step of an item took in one generation: how many
// times it ran and how long its last run took.
type StepRun struct {
	Step       int   `json:"step"`
	Runs       int   `json:"runs"`
	DurationMS int64 `json:"duration_ms"`
}

// DLQEntry is a dead-lettered item on fleet.dlq.<job> (docs/contract.md §5).
type DLQEntry struct {
	// V is the schema version (docs/contract.md §8).
	V             Schema          `json:"v"`
	JobID         string          `json:"job_id"`
	ItemID        string          `json:"item_id"`
	Index         int64           `json:"index"`
	Group         string          `json:"group,omitempty"`
	Pool          string          `json:"pool"`
	Payload       json.RawMessage `json:"payload"`
	CorrelationID string          `json:"correlation_id"`
	// Subject and StreamSeq locate the original work message.
	Subject    string `json:"subject"`
	StreamSeq  uint64 `json:"stream_seq"`
	Generation int    `json:"generation"`
	// ItemRuns is the number of whole-item runs the item took before it
	// was dead-lettered, in jobs whose error_policy.retry_config re-runs
	// failed items (each attempt says its run); 0 in others.
	ItemRuns int       `json:"item_runs,omitempty"`
	Attempts []Attempt `json:"attempts"`
	// AttemptsDropped counts attempts left out of Attempts (the oldest), to
	// keep the entry within the server's max_payload.
	AttemptsDropped int `json:"attempts_dropped,omitempty"`
	// PayloadTruncated is set when even that was not enough (only a poison
	// message's raw body can be that large): Payload is then a JSON string
	// holding the start of the payload, and the entry cannot be replayed.
	PayloadTruncated bool   `json:"payload_truncated,omitempty"`
	Reason           string `json:"reason"`
	Error            string `json:"error,omitempty"`
	ErrorClass       string `json:"error_class,omitempty"`
	// Signature is a stable hash of the normalised error.
	Signature      string    `json:"signature,omitempty"`
	ReplayCount    int       `json:"replay_count"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	Agent          string    `json:"agent,omitempty"`
}
