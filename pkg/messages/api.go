package messages

import (
	"encoding/json"
	"time"
)

// ServiceName is the NATS micro service name of the coordinator API.
const ServiceName = "jetfleet"

// API endpoints, relative to "<prefix>.api.".
const (
	EndpointJobsSubmit = "jobs.submit"
	EndpointJobsStatus = "jobs.status"
	EndpointJobsList   = "jobs.list"
	EndpointJobsCancel = "jobs.cancel"
	EndpointDLQList    = "dlq.list"
	EndpointDLQGet     = "dlq.get"
	EndpointDLQStats   = "dlq.stats"
	EndpointDLQReplay  = "dlq.replay"
	EndpointDLQPurge   = "dlq.purge"
)

// API error codes.
const (
	CodeBadRequest = "bad_request"
	CodeInvalid    = "invalid_spec"
	CodeNotFound   = "not_found"
	CodeConflict   = "conflict"
	CodeInternal   = "internal"
	CodeTooLarge   = "too_large"
)

// APIError is the body of an API error reply.
type APIError struct {
	Code     string       `json:"code"`
	Message  string       `json:"message"`
	Field    string       `json:"field,omitempty"`
	Problems []FieldError `json:"problems,omitempty"`
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

// ErrorReply wraps an APIError so that every reply can be decoded into a
// struct with an "error" field to tell failures from successes.
type ErrorReply struct {
	Error *APIError `json:"error,omitempty"`
}

// SubmitReply answers jobs.submit: the request body is a JobSpec in JSON.
type SubmitReply struct {
	ErrorReply
	JobID string `json:"job_id,omitempty"`
	// Existing is true when the id was already known (idempotent resubmit).
	Existing bool   `json:"existing,omitempty"`
	State    string `json:"state,omitempty"`
}

// JobRequest names a job (jobs.status, jobs.cancel).
type JobRequest struct {
	JobID string `json:"job_id"`
}

// StatusReply answers jobs.status and jobs.cancel.
type StatusReply struct {
	ErrorReply
	Status *JobStatus `json:"status,omitempty"`
}

// ListRequest filters jobs.list.
type ListRequest struct {
	State string `json:"state,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// ListReply answers jobs.list.
type ListReply struct {
	ErrorReply
	Jobs []JobStatus `json:"jobs"`
}

// DLQFilter selects dead-letter entries.
type DLQFilter struct {
	JobID      string    `json:"job_id,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	ErrorClass string    `json:"error_class,omitempty"`
	Signature  string    `json:"signature,omitempty"`
	Text       string    `json:"text,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	Until      time.Time `json:"until,omitzero"`
	Limit      int       `json:"limit,omitempty"`
}

// DLQListReply answers dlq.list.
type DLQListReply struct {
	ErrorReply
	Entries []DLQEntryRef `json:"entries"`
}

// DLQEntryRef is an entry with its DLQ stream sequence.
type DLQEntryRef struct {
	Seq   uint64   `json:"seq"`
	Entry DLQEntry `json:"entry"`
}

// DLQGetRequest names one entry by DLQ stream sequence.
type DLQGetRequest struct {
	Seq uint64 `json:"seq"`
}

// DLQGetReply answers dlq.get.
type DLQGetReply struct {
	ErrorReply
	Entry *DLQEntryRef `json:"entry,omitempty"`
}

// DLQStats summarises the DLQ (dlq.stats).
type DLQStats struct {
	ErrorReply
	Total        int64            `json:"total"`
	Bytes        uint64           `json:"bytes"`
	ByJob        map[string]int64 `json:"by_job"`
	ByReason     map[string]int64 `json:"by_reason"`
	ByErrorClass map[string]int64 `json:"by_error_class"`
	BySignature  map[string]int64 `json:"by_signature"`
	OldestAgeMS  int64            `json:"oldest_age_ms"`
}

// DLQReplayRequest starts a replay (dlq.replay).
type DLQReplayRequest struct {
	DLQFilter
	// Rate is items per second; 0 = unpaced.
	Rate          float64 `json:"rate,omitempty"`
	DryRun        bool    `json:"dry_run,omitempty"`
	ResetAttempts bool    `json:"reset_attempts,omitempty"`
}

// DLQReplayReply answers dlq.replay.
type DLQReplayReply struct {
	ErrorReply
	ReplayID string           `json:"replay_id,omitempty"`
	Matched  int64            `json:"matched"`
	Replayed int64            `json:"replayed"`
	ByJob    map[string]int64 `json:"by_job,omitempty"`
	DryRun   bool             `json:"dry_run,omitempty"`
}

// DLQPurgeRequest deletes matching entries; Confirm must be true.
type DLQPurgeRequest struct {
	DLQFilter
	Confirm bool `json:"confirm"`
}

// DLQPurgeReply answers dlq.purge.
type DLQPurgeReply struct {
	ErrorReply
	Purged int64 `json:"purged"`
}

// Event types, the last token of fleet.events.<job>.<type>.
const (
	EventSubmitted  = "submitted"
	EventRejected   = "rejected"
	EventStarted    = "started"
	EventCompleted  = "completed"
	EventItemFailed = "item_failed"
	EventErrorBatch = "error_batch"
	EventBudget     = "budget"
	EventBestEffort = "best_effort"
	EventLateResult = "late_result"
	EventBreaker    = "breaker"
	EventReplay     = "replay"
	EventDLQ        = "dlq"
	// EventMapEnded is published when a job's map phase ends for any
	// reason; agents stop starting the job's (generation 0) items.
	EventMapEnded = "map_ended"
	EventStopped  = "stopped"
	EventReduce   = "reduce"
)

// Event is the body of a FLEET_EVENTS message.
type Event struct {
	// Type is the event's name, e.g. "RetryBudgetExhausted", "JobCompleted".
	Type  string          `json:"type"`
	JobID string          `json:"job_id"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data,omitempty"`
}
