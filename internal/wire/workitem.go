package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// WorkItem is the body of a work message on fleet.work.<pool>.<job>.
type WorkItem struct {
	// V is the schema version (docs/contract.md §8).
	V      messages.Schema `json:"v"`
	JobID  string          `json:"job_id"`
	ItemID string          `json:"item_id"`
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
	History []messages.Attempt `json:"history,omitempty"`
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
	Reduce *messages.ReduceInput `json:"reduce,omitempty"`
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

// ItemState is an item's retry state in the fleet_items bucket, created at
// its first failure. Any agent resumes the item from it.
type ItemState struct {
	// V is the schema version (docs/contract.md §8).
	V          messages.Schema `json:"v"`
	JobID      string          `json:"job_id"`
	ItemID     string          `json:"item_id"`
	Generation int             `json:"generation"`
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
	StepDelaySpent messages.Duration `json:"step_delay_spent"`
	// LastDelay is the previous backoff (decorrelated jitter needs it).
	LastDelay messages.Duration `json:"last_delay,omitempty"`
	// StartedAt is when the item's current run began: its first step run
	// in this generation, or in this whole-item run (on_item_failure:
	// retry). The job's agent_timeout counts from it.
	StartedAt time.Time `json:"started_at,omitzero"`
	// ItemRun counts whole-item runs under error_policy.retry_config
	// (on_item_failure: retry or dlq; 1-based).
	ItemRun int `json:"item_run,omitempty"`
	// ItemDelay is the backoff before the current whole-item run.
	ItemDelay messages.Duration `json:"item_delay,omitempty"`
	// Retries counts retry units claimed by the item (per-item budget).
	Retries int `json:"retries"`
	// Outputs are the outputs of the steps finished so far.
	Outputs []string `json:"outputs,omitempty"`
	// Captures are the variables the steps finished so far captured
	// (capture:), by name; at most MaxCaptureBytes in all.
	Captures map[string]*Capture `json:"captures,omitempty"`
	// Ran records the successful step runs of this generation (for the
	// result's per-step breakdown, Result.Steps).
	Ran          []messages.StepRun `json:"ran,omitempty"`
	FirstFailure time.Time          `json:"first_failure"`
	History      []messages.Attempt `json:"history"`
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

// PeekSchema reads only the "v" member of a message or record: the schema
// version of a body that does not decode otherwise (a newer schema may
// change what a member holds). It is 0 when data has none or is not a
// JSON object.
func PeekSchema(data []byte) messages.Schema {
	var v struct {
		V messages.Schema `json:"v"`
	}
	_ = json.Unmarshal(data, &v)
	return v.V
}
