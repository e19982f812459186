package messages

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"time"
)

// WorkItem is the body of a work message on fleet.work.<pool>.<job>.
type WorkItem struct {
	JobID  string `json:"job_id"`
	ItemID string `json:"item_id"`
	// Index is the item's 0-based position in the job's input.
	Index int64 `json:"index"`
	// Group is the item's best-effort group ("" = the single default group).
	Group string `json:"group,omitempty"`
	// Payload is the item as given in the input.
	Payload json.RawMessage `json:"payload"`
	// Generation is 0 when first published and grows on every replay; it
	// makes the message id fresh so the dedupe window cannot drop a replay.
	Generation int `json:"generation"`
	// CorrelationID follows the item across retries and replays.
	CorrelationID string `json:"correlation_id"`
	// ReplayCount counts DLQ replays of this item.
	ReplayCount int `json:"replay_count,omitempty"`
	// History carries the attempts of earlier generations (on replay).
	History []Attempt `json:"history,omitempty"`
	// HistoryDropped counts earlier attempts left out of History (the
	// oldest), to keep the message within the server's max_payload.
	HistoryDropped int `json:"history_dropped,omitempty"`
	// ResetAttempts gives a replayed item all of its attempts again (replay
	// with --reset-attempts). Without it the step the item gave up at counts
	// on from the attempts in History: one more try for an item that had
	// used them all.
	ResetAttempts bool `json:"reset_attempts,omitempty"`
	// Phase is "" for the job's items (the map phase) and PhaseReduce for
	// the single reduce item published after the map phase ends.
	Phase string `json:"phase,omitempty"`
	// Reduce carries what a reduce item's steps see as ${map.*}.
	Reduce *ReduceInput `json:"reduce,omitempty"`
	// Park is 0 for a message the coordinator published and n for the copy
	// an agent parked as the item's n-th park (a retry on a long backoff
	// that holds no slot of the consumer; docs/retries.md "Parking"). A
	// delivery whose Park is below ItemState.Park is superseded by a parked
	// copy and is not run.
	Park int `json:"park,omitempty"`
	// Held counts the times an agent held the item while its job or pool
	// was paused (HeldSubject): a copy moved back on resume reads the
	// item's state like any redelivery.
	Held int `json:"held,omitempty"`
	// Sig is the coordinator's signature of the item for the pool it was
	// sent to (SignedBytes), base64url without padding; empty when the
	// coordinator signs nothing. Agents given the coordinator's public
	// key run only items whose signature it verifies.
	Sig string `json:"sig,omitempty"`
}

// signedDomain starts the bytes a work item's signature covers, so that a
// signature of anything else is never one of a work item.
const signedDomain = "jetfleet work item v1"

// SignedBytes returns what the coordinator signs for wi sent to pool:
// the pool, the job, the item's id, index, group, generation, phase,
// replay count, reset flag, payload (as json.Marshal writes it) and reduce input, each
// length-prefixed. Not covered: Park and Held (agents change them when
// they park or hold the item), History and HistoryDropped (what earlier generations did,
// which the replay may shorten to fit), CorrelationID and Sig itself.
func (wi *WorkItem) SignedBytes(pool string) []byte {
	b := make([]byte, 0, 128+len(wi.Payload))
	field := func(v []byte) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	str := func(v string) { field([]byte(v)) }
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	str(signedDomain)
	str(pool)
	str(wi.JobID)
	str(wi.ItemID)
	num(wi.Index)
	str(wi.Group)
	num(int64(wi.Generation))
	str(wi.Phase)
	num(int64(wi.ReplayCount))
	if wi.ResetAttempts {
		num(1)
	} else {
		num(0)
	}
	// The payload as json.Marshal writes it (compacted, HTML-escaped), so
	// that the bytes an agent decodes sign the same as the coordinator's.
	var compact, payload bytes.Buffer
	if json.Compact(&compact, wi.Payload) == nil {
		json.HTMLEscape(&payload, compact.Bytes())
		field(payload.Bytes())
	} else {
		field(wi.Payload)
	}
	if wi.Reduce != nil {
		r, _ := json.Marshal(wi.Reduce)
		field(r)
	} else {
		field(nil)
	}
	return b
}

// EncodeSig and DecodeSig convert between a signature and WorkItem.Sig.
func EncodeSig(sig []byte) string { return base64.RawURLEncoding.EncodeToString(sig) }

// DecodeSig decodes WorkItem.Sig.
func DecodeSig(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

// PhaseReduce marks the reduce item and its result.
const PhaseReduce = "reduce"

// ReduceItemID is the item id of a job's reduce item.
const ReduceItemID = "_reduce"

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
	// Decision is what followed: retry, snooze, give_up, continue, fallback.
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

// ItemState is an item's retry state in the fleet_items bucket, created at
// its first failure. Any agent resumes the item from it.
type ItemState struct {
	JobID      string `json:"job_id"`
	ItemID     string `json:"item_id"`
	Generation int    `json:"generation"`
	// Step is the 0-based step to resume at.
	Step int `json:"step"`
	// StepAttempt is the number of failed runs of Step so far.
	StepAttempt int `json:"step_attempt"`
	// StepFirstFailure is when Step first failed.
	StepFirstFailure time.Time `json:"step_first_failure"`
	// StepDelaySpent is the cumulative backoff delay granted to Step,
	// jitter included: what its retry_budget bounds. (A state written by
	// an earlier agent may also hold step_budget_expiry, a wall-clock
	// expiry no longer kept; decoding ignores it.)
	StepDelaySpent Duration `json:"step_delay_spent"`
	// LastDelay is the previous backoff (decorrelated jitter needs it).
	LastDelay Duration `json:"last_delay,omitempty"`
	// StartedAt is when the item's current run began: its first step run
	// in this generation, or in this whole-item run (on_item_failure:
	// retry). The job's agent_timeout counts from it.
	StartedAt time.Time `json:"started_at,omitzero"`
	// ItemRun counts whole-item runs under error_policy.retry_config
	// (on_item_failure: retry or dlq; 1-based).
	ItemRun int `json:"item_run,omitempty"`
	// ItemDelay is the backoff before the current whole-item run.
	ItemDelay Duration `json:"item_delay,omitempty"`
	// Retries counts retry units claimed by the item (per-item budget).
	Retries int `json:"retries"`
	// Outputs are the outputs of the steps finished so far.
	Outputs []string `json:"outputs,omitempty"`
	// Ran records the successful step runs of this generation (for the
	// result's per-step breakdown, Result.Steps).
	Ran          []StepRun `json:"ran,omitempty"`
	FirstFailure time.Time `json:"first_failure"`
	History      []Attempt `json:"history"`
	// HistoryDropped counts attempts left out of History (the oldest): it
	// keeps at most the newest 100, within the server's max_payload.
	HistoryDropped int `json:"history_dropped,omitempty"`
	// Final is set (to an Outcome*) once the item gave up and its terminal
	// outcome is being recorded: a redelivery then re-finalises the item
	// (idempotent DLQ publish, result, Term) instead of running it again.
	Final string `json:"final,omitempty"`
	// Reason, Error and ErrorClass describe the give-up when Final is set.
	Reason     string `json:"reason,omitempty"`
	Error      string `json:"error,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	// Park counts the item's parks in this generation: the latest parked
	// copy of its work message carries WorkItem.Park = Park, and ParkUntil
	// is when that copy is due. Written before the copy is scheduled, so
	// a redelivery of the message it replaced recognises itself as stale.
	Park      int       `json:"park,omitempty"`
	ParkUntil time.Time `json:"park_until,omitzero"`
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
)

// Result is the outcome of one item run, on fleet.results.<job>.
type Result struct {
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
	// Phase is PhaseReduce for the reduce item's result.
	Phase      string    `json:"phase,omitempty"`
	Agent      string    `json:"agent,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS int64     `json:"duration_ms"`
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
