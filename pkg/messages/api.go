package messages

import (
	"encoding/json"
	"time"
)

// ServiceName is the NATS micro service name of the coordinator API.
const ServiceName = "jetfleet"

// AgentServiceName is the NATS micro service every agent registers, so
// that `nats micro ls` lists the fleet; its one endpoint, EndpointAgentStatus,
// answers on <prefix>.agent.<pool>.<base64url name>.status.
const AgentServiceName = "jetfleet-agent"

// EndpointAgentStatus is the agent service's endpoint: it replies with
// the agent's AgentPresence.
const EndpointAgentStatus = "status"

// API endpoints, relative to "<prefix>.api.".
const (
	EndpointJobsSubmit = "jobs.submit"
	EndpointJobsStatus = "jobs.status"
	EndpointJobsList   = "jobs.list"
	EndpointJobsCancel = "jobs.cancel"
	// EndpointJobsPrune deletes finished jobs' records and data (PruneRequest).
	EndpointJobsPrune = "jobs.prune"
	EndpointDLQList   = "dlq.list"
	EndpointDLQGet    = "dlq.get"
	EndpointDLQStats  = "dlq.stats"
	EndpointDLQReplay = "dlq.replay"
	EndpointDLQPurge  = "dlq.purge"
	// EndpointDLQReplayCancel cancels a running replay (DLQReplayCancelRequest).
	EndpointDLQReplayCancel = "dlq.replay.cancel"
	// EndpointDLQReplays reports running and recent replays (DLQReplaysRequest).
	EndpointDLQReplays = "dlq.replays"
)

// API error codes.
const (
	CodeBadRequest = "bad_request"
	CodeInvalid    = "invalid_spec"
	CodeNotFound   = "not_found"
	CodeConflict   = "conflict"
	CodeInternal   = "internal"
	CodeTooLarge   = "too_large"
	// CodeUnavailable: this coordinator cannot answer now (too many
	// requests at once, or the request's deadline passed); another may.
	CodeUnavailable = "unavailable"
	// CodeTooMany: a limit on open jobs is reached; try again later.
	CodeTooMany = "too_many"
	// CodeStoreFull: JetStream has no room to store what the request would
	// write (its max_file_store or the account's limit is reached); nothing
	// was stored. Try again once an operator has made room.
	CodeStoreFull = "store_full"
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

// JobRequest names a job (jobs.status).
type JobRequest struct {
	JobID string `json:"job_id"`
}

// CancelRequest asks jobs.cancel to cancel a job: its queued items are
// removed and counted not_run, and the job ends cancelled. Steps already
// running finish, unless Kill is set: then every agent terminates the
// job's running steps (a shell step's process group gets SIGTERM, then
// SIGKILL after the agent's kill grace; a handler's context is
// cancelled), and those items stay not_run. Kill on a job that was
// cancelled before kills what still runs of it.
type CancelRequest struct {
	JobID string `json:"job_id"`
	Kill  bool   `json:"kill,omitempty"`
}

// PruneRequest asks jobs.prune to delete the records of jobs that finished
// at least OlderThan ago, with whatever data of theirs is left (item state,
// budget, breaker, results, inputs, events, submission). Unset OlderThan:
// the coordinator's job retention.
type PruneRequest struct {
	OlderThan *Duration `json:"older_than,omitempty"`
	// DryRun lists what would be pruned and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// PruneReply answers jobs.prune.
type PruneReply struct {
	ErrorReply
	// Pruned counts the jobs pruned (or that would be, with DryRun).
	Pruned int `json:"pruned"`
	// Jobs lists their ids, at most MaxPruneListed of them.
	Jobs []string `json:"jobs,omitempty"`
	// Failed counts jobs whose pruning failed (retried by the next pass).
	Failed int  `json:"failed,omitempty"`
	DryRun bool `json:"dry_run,omitempty"`
}

// MaxPruneListed bounds PruneReply.Jobs.
const MaxPruneListed = 1000

// StatusReply answers jobs.status and jobs.cancel.
type StatusReply struct {
	ErrorReply
	Status *JobStatus `json:"status,omitempty"`
}

// ListRequest asks jobs.list for one page of jobs, newest submission
// first. Every set filter must match.
type ListRequest struct {
	// State keeps the jobs in this state.
	State string `json:"state,omitempty"`
	// Limit is the page size: 0 = the coordinator's default (100); at most
	// 1000.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a listing after the last job of an earlier page: the
	// reply's next_cursor. Empty = from the newest job.
	Cursor string `json:"cursor,omitempty"`
	// Pool keeps the jobs of this pool.
	Pool string `json:"pool,omitempty"`
	// Text keeps the jobs whose id or name contains it (any case).
	Text string `json:"text,omitempty"`
}

// ListReply answers jobs.list with job summaries: JobStatus without the
// per-group, per-error and problem lists and the reduce output, which
// jobs.status returns.
type ListReply struct {
	ErrorReply
	Jobs []JobStatus `json:"jobs"`
	// NextCursor, when set, continues the listing (ListRequest.Cursor).
	// With pool or text filters a page may hold fewer than limit jobs (the
	// coordinator examines a bounded number of jobs per request) and still
	// have a next cursor.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total is the number of jobs in the requested state (all jobs without
	// a state filter), before the pool and text filters.
	Total int `json:"total"`
	// States counts all jobs by state.
	States map[string]int `json:"states,omitempty"`
}

// DLQFilter selects dead-letter entries. Every set field must match.
type DLQFilter struct {
	JobID  string `json:"job_id,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ErrorClass is the class of the entry's final error (network, timeout,
	// server_error, rate_limit, error).
	ErrorClass string `json:"error_class,omitempty"`
	// Signature matches the entry's error signature or a prefix of it.
	Signature string `json:"signature,omitempty"`
	// Text is a case-insensitive substring of the error, the item id, the
	// payload or an attempt's message.
	Text string `json:"text,omitempty"`
	// Since and Until bound dead_lettered_at (Since inclusive, Until exclusive).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Limit caps the entries returned or acted on; 0 = no limit (dlq.list
	// applies its own page size).
	Limit int `json:"limit,omitempty"`
	// AfterSeq skips entries up to this DLQ stream sequence (paging).
	AfterSeq uint64 `json:"after_seq,omitempty"`
}

// DLQListReply answers dlq.list. When More is set, the next page starts
// after NextSeq (set DLQFilter.AfterSeq to it). A request examines a
// bounded number of entries (Scanned), so a filter that matches few of
// them may return a short, even empty, page with More set.
type DLQListReply struct {
	ErrorReply
	Entries []DLQEntryRef `json:"entries"`
	More    bool          `json:"more,omitempty"`
	NextSeq uint64        `json:"next_seq,omitempty"`
	Scanned int           `json:"scanned,omitempty"`
}

// DLQEntryRef is an entry with its DLQ stream sequence.
type DLQEntryRef struct {
	Seq uint64 `json:"seq"`
	// Origin is who wrote the entry, read from its subject: the pool of the
	// agent that dead-lettered the item, or "_coordinator" (the DLQ mover).
	Origin string   `json:"origin,omitempty"`
	Entry  DLQEntry `json:"entry"`
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

// DLQStats summarises the DLQ, or the entries a filter selects (dlq.stats;
// the request is a DLQFilter).
type DLQStats struct {
	ErrorReply
	Total        int64            `json:"total"`
	Bytes        uint64           `json:"bytes"`
	ByJob        map[string]int64 `json:"by_job"`
	ByReason     map[string]int64 `json:"by_reason"`
	ByErrorClass map[string]int64 `json:"by_error_class"`
	BySignature  map[string]int64 `json:"by_signature"`
	// Examples holds one (shortened) error message per signature.
	Examples    map[string]string `json:"examples,omitempty"`
	OldestAgeMS int64             `json:"oldest_age_ms"`
	// Stream is the whole DLQ stream's size and limits.
	Stream *DLQStreamState `json:"stream,omitempty"`
	// Pools are each pool's dead letters against the pool's own quota: at
	// its quota a pool's agents keep the items they would dead-letter.
	Pools []DLQStreamState `json:"pools,omitempty"`
}

// DLQStreamState is the DLQ stream's size against its limits, or a pool's
// dead letters against the pool's quota.
type DLQStreamState struct {
	// Pool is set for a pool's quota.
	Pool     string `json:"pool,omitempty"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// MaxMessages and MaxBytes are the limits (-1 or 0 = none).
	MaxMessages int64 `json:"max_messages"`
	MaxBytes    int64 `json:"max_bytes"`
	MaxAgeMS    int64 `json:"max_age_ms"`
	// FillRatio is the larger of messages/max_messages and bytes/max_bytes.
	FillRatio float64 `json:"fill_ratio"`
	// Problem is set for a pool that has agents but no dead-letter stream
	// (its quota could not be reserved): what is wrong and what to do.
	Problem string `json:"problem,omitempty"`
}

// DLQReplayRequest starts a replay (dlq.replay).
type DLQReplayRequest struct {
	DLQFilter
	// Rate is items per second; 0 = unpaced.
	Rate          float64 `json:"rate,omitempty"`
	DryRun        bool    `json:"dry_run,omitempty"`
	ResetAttempts bool    `json:"reset_attempts,omitempty"`
	// Wait makes the request block until the replay ends or WaitTimeout
	// (default 30s, at most 10m) passes; the reply is the status then.
	Wait        bool     `json:"wait,omitempty"`
	WaitTimeout Duration `json:"wait_timeout,omitempty"`
}

// Replay states.
const (
	ReplayRunning   = "running"
	ReplayCompleted = "completed"
	ReplayCancelled = "cancelled"
	ReplayFailed    = "failed"
)

// DLQReplayStatus is a replay's progress. Replayed counts entries whose item
// was republished (PubAck received) and whose entry was then deleted.
type DLQReplayStatus struct {
	ReplayID string `json:"replay_id,omitempty"`
	// State is running, completed, cancelled or failed ("" for a dry run).
	State    string `json:"state,omitempty"`
	DryRun   bool   `json:"dry_run,omitempty"`
	Matched  int64  `json:"matched"`
	Replayed int64  `json:"replayed"`
	// Failed counts entries that could not be replayed (their job is gone, …);
	// they stay in the DLQ. Skipped counts entries not replayable (poison
	// messages) or taken by another replay or a purge meanwhile.
	Failed        int64            `json:"failed"`
	Skipped       int64            `json:"skipped"`
	ByJob         map[string]int64 `json:"by_job,omitempty"`
	ByErrorClass  map[string]int64 `json:"by_error_class,omitempty"`
	BySignature   map[string]int64 `json:"by_signature,omitempty"`
	Filter        DLQFilter        `json:"filter"`
	Rate          float64          `json:"rate,omitempty"`
	ResetAttempts bool             `json:"reset_attempts,omitempty"`
	StartedAt     *time.Time       `json:"started_at,omitempty"`
	FinishedAt    *time.Time       `json:"finished_at,omitempty"`
	// LastError is the last per-entry failure, or why the replay failed.
	LastError string `json:"last_error,omitempty"`
}

// DLQReplayReply answers dlq.replay and dlq.replay.cancel.
type DLQReplayReply struct {
	ErrorReply
	DLQReplayStatus
}

// DLQReplayCancelRequest names a running replay (dlq.replay.cancel). The
// reply comes once the replay has stopped, with its final counts.
type DLQReplayCancelRequest struct {
	ReplayID string `json:"replay_id"`
}

// DLQReplaysRequest asks for one replay's status, or every known replay's.
type DLQReplaysRequest struct {
	ReplayID string `json:"replay_id,omitempty"`
}

// DLQReplaysReply answers dlq.replays, newest first.
type DLQReplaysReply struct {
	ErrorReply
	Replays []DLQReplayStatus `json:"replays"`
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
	// V is the schema version (docs/contract.md §8).
	V Schema `json:"v"`
	// Type is the event's name, e.g. "RetryBudgetExhausted", "JobCompleted".
	Type  string          `json:"type"`
	JobID string          `json:"job_id"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data,omitempty"`
}
