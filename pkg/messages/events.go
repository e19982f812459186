package messages

import "time"

// Names of the agents' events (Event.Type and the HeaderEventType header),
// published on fleet.events.<job>.<budget|breaker>.<pool>.
const (
	EventTypeBudgetExhausted = "RetryBudgetExhausted"
	EventTypeBreakerChanged  = "CircuitBreakerStateChanged"
)

// BudgetExhaustedEvent is the Data of a RetryBudgetExhausted event: an
// agent's claim for a retry was refused by the job's retry budget.
type BudgetExhaustedEvent struct {
	JobID  string `json:"job_id"`
	ItemID string `json:"item_id"`
	// Scope is "item" (retry_budget_per_item) or "job" (retry_budget).
	Scope string `json:"scope"`
	// Reason is ReasonItemBudget or ReasonJobBudget.
	Reason string `json:"reason"`
	// Consumed and Limit are the item's retries and its cap for the item
	// scope, the job's consumed units and its total for the job scope.
	Consumed int `json:"consumed"`
	Limit    int `json:"limit"`
}

// BreakerChangedEvent is the Data of a CircuitBreakerStateChanged event,
// published by the agent whose write changed a job's circuit breaker, or
// a step's own (retry_config.circuit_breaker: Step is then set).
type BreakerChangedEvent struct {
	JobID string `json:"job_id"`
	// Step is the 0-based index in agent_template of the step whose own
	// breaker changed, and StepName its name; absent for the job's breaker.
	Step     *int   `json:"step,omitempty"`
	StepName string `json:"step_name,omitempty"`
	// From and To are the states: closed, open or half_open.
	From string `json:"from"`
	To   string `json:"to"`
	// Failures, Successes and Probes are the counts that decided the
	// transition.
	Failures  int `json:"failures"`
	Successes int `json:"successes"`
	Probes    int `json:"probes"`
	// Agent is the name of the agent that wrote the change.
	Agent string `json:"agent"`
	// OpenedAt is when the breaker (last) opened; set when To is open or
	// half_open.
	OpenedAt time.Time `json:"opened_at,omitzero"`
}

// Payloads of the coordinator's events: the Data of an [Event] on
// fleet.events.<job>.<type>, one type per event name. Each names its event
// ([EventPayload]), so a publisher cannot put one event's data under
// another's name. docs/jobs.md and docs/dlq.md say when each is published.

// EventPayload is the data of one kind of event. Only this package's
// payload types implement it; EventOf reads the name and token of one.
type EventPayload interface {
	// eventName is the event's name, Event.Type ("JobStarted").
	eventName() string
	// eventToken is the event type token of its subject:
	// fleet.events.<job>.<token> for the coordinator's events,
	// fleet.events.<job>.<token>.<pool> for an agent's (internal/wire.AgentEventSubject).
	eventToken() string
}

// EventOf returns the name of p's event (Event.Type, "JobStarted") and the
// event type token of its subject (fleet.events.<job>.<token>).
func EventOf(p EventPayload) (name, token string) { return p.eventName(), p.eventToken() }

func (BudgetExhaustedEvent) eventName() string  { return EventTypeBudgetExhausted }
func (BreakerChangedEvent) eventName() string   { return EventTypeBreakerChanged }
func (BudgetExhaustedEvent) eventToken() string { return EventBudget }
func (BreakerChangedEvent) eventToken() string  { return EventBreaker }

// JobSubmittedEvent: a job was accepted.
type JobSubmittedEvent struct {
	Items int64  `json:"items"`
	Pool  string `json:"pool"`
}

// JobRejectedEvent: a durable submission was rejected.
type JobRejectedEvent struct {
	Problems []FieldError `json:"problems"`
}

// JobStartedEvent: a job's runner started it.
type JobStartedEvent struct {
	Items int64 `json:"items"`
}

// JobCompletedEvent: a job finished (again, after a DLQ replay reopened
// it); the data is its status then.
type JobCompletedEvent JobStatus

// MapPhaseEndedEvent: a job's map phase ended; agents drop its queued
// first-generation items. With Kill (a cancel with kill) they also
// terminate the job's steps that are running; it may then come again for
// a job cancelled before.
type MapPhaseEndedEvent struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Kill   bool   `json:"kill,omitempty"`
}

// JobStoppedEvent: an error policy stopped a job; the counts are those of
// the moment it stopped.
type JobStoppedEvent struct {
	Reason       string `json:"reason"`
	Succeeded    int64  `json:"succeeded"`
	Failed       int64  `json:"failed"`
	DeadLettered int64  `json:"dead_lettered"`
	Skipped      int64  `json:"skipped"`
	NotRun       int64  `json:"not_run"`
}

// BestEffortCompletionEvent: a best-effort job's map phase ended.
type BestEffortCompletionEvent struct {
	Reason          string  `json:"reason"`
	Groups          int     `json:"groups"`
	GroupsCompleted int     `json:"groups_completed"`
	MinGroups       int     `json:"min_groups"`
	Success         bool    `json:"success"`
	CompletionRatio float64 `json:"completion_ratio"`
	NotRun          int64   `json:"not_run"`
}

// LateResultEvent: a result arrived for an item counted not_run when the
// map phase ended. Policy is the job's late_results.
type LateResultEvent struct {
	ItemID  string `json:"item_id"`
	Index   int64  `json:"index"`
	Outcome string `json:"outcome"`
	Policy  string `json:"policy"`
	Group   string `json:"group"`
}

// JobResultAmendedEvent: a late result amended a best-effort job's counts
// (late_results: update).
type JobResultAmendedEvent LateResultEvent

// ItemFailedEvent: an item failed (error_collection: immediate).
type ItemFailedEvent struct {
	ItemID    string `json:"item_id"`
	Class     string `json:"class"`
	Message   string `json:"message"`
	Signature string `json:"signature"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
}

// ErrorBatchEvent: failures collected by error_collection: batched (and
// the rest when the job ends).
type ErrorBatchEvent struct {
	Count  int              `json:"count"`
	Errors []ItemErrorEntry `json:"errors"`
}

// ItemErrorEntry is one failure of an [ErrorBatchEvent].
type ItemErrorEntry struct {
	ItemID    string `json:"item_id"`
	Class     string `json:"class,omitempty"`
	Message   string `json:"message"`
	Signature string `json:"signature"`
}

// ReduceStartedEvent: a job's reduce item was published.
type ReduceStartedEvent ReduceInput

// ReduceCompletedEvent: a job's reduce item reported its outcome.
type ReduceCompletedEvent ReduceStatus

// DLQNearlyFullEvent: the DLQ stream, or a pool's dead letters (Pool
// set), passed 80% of a limit or of the pool's quota.
type DLQNearlyFullEvent DLQStreamState

// DLQPoolMissingEvent: a pool has agents but no dead-letter stream (Pool
// and Problem set): its quota could not be reserved.
type DLQPoolMissingEvent DLQStreamState

// DLQReplayStartedEvent, DLQReplayProgressEvent and DLQReplayFinishedEvent:
// a replay started, handled another batch of entries, and ended.
type (
	DLQReplayStartedEvent  DLQReplayStatus
	DLQReplayProgressEvent DLQReplayStatus
	DLQReplayFinishedEvent DLQReplayStatus
)

func (JobSubmittedEvent) eventName() string         { return "JobSubmitted" }
func (JobRejectedEvent) eventName() string          { return "JobRejected" }
func (JobStartedEvent) eventName() string           { return "JobStarted" }
func (JobCompletedEvent) eventName() string         { return "JobCompleted" }
func (MapPhaseEndedEvent) eventName() string        { return "MapPhaseEnded" }
func (JobStoppedEvent) eventName() string           { return "JobStopped" }
func (BestEffortCompletionEvent) eventName() string { return "BestEffortCompletion" }
func (LateResultEvent) eventName() string           { return "LateResult" }
func (JobResultAmendedEvent) eventName() string     { return "JobResultAmended" }
func (ItemFailedEvent) eventName() string           { return "ItemFailed" }
func (ErrorBatchEvent) eventName() string           { return "ErrorBatch" }
func (ReduceStartedEvent) eventName() string        { return "ReduceStarted" }
func (ReduceCompletedEvent) eventName() string      { return "ReduceCompleted" }
func (DLQNearlyFullEvent) eventName() string        { return "DLQNearlyFull" }
func (DLQPoolMissingEvent) eventName() string       { return "DLQPoolMissing" }
func (DLQReplayStartedEvent) eventName() string     { return "DLQReplayStarted" }
func (DLQReplayProgressEvent) eventName() string    { return "DLQReplayProgress" }
func (DLQReplayFinishedEvent) eventName() string    { return "DLQReplayFinished" }

func (JobSubmittedEvent) eventToken() string         { return EventSubmitted }
func (JobRejectedEvent) eventToken() string          { return EventRejected }
func (JobStartedEvent) eventToken() string           { return EventStarted }
func (JobCompletedEvent) eventToken() string         { return EventCompleted }
func (MapPhaseEndedEvent) eventToken() string        { return EventMapEnded }
func (JobStoppedEvent) eventToken() string           { return EventStopped }
func (BestEffortCompletionEvent) eventToken() string { return EventBestEffort }
func (LateResultEvent) eventToken() string           { return EventLateResult }
func (JobResultAmendedEvent) eventToken() string     { return EventLateResult }
func (ItemFailedEvent) eventToken() string           { return EventItemFailed }
func (ErrorBatchEvent) eventToken() string           { return EventErrorBatch }
func (ReduceStartedEvent) eventToken() string        { return EventReduce }
func (ReduceCompletedEvent) eventToken() string      { return EventReduce }
func (DLQNearlyFullEvent) eventToken() string        { return EventDLQ }
func (DLQPoolMissingEvent) eventToken() string       { return EventDLQ }
func (DLQReplayStartedEvent) eventToken() string     { return EventReplay }
func (DLQReplayProgressEvent) eventToken() string    { return EventReplay }
func (DLQReplayFinishedEvent) eventToken() string    { return EventReplay }
