package messages

import "time"

// Job states.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateStopped   = "stopped"
	StateCancelled = "cancelled"
	// StateRejected is the state of a durable submission that failed validation.
	StateRejected = "rejected"
)

// TerminalState reports whether a job in state s is finished.
func TerminalState(s string) bool {
	switch s {
	case StateSucceeded, StateFailed, StateStopped, StateCancelled, StateRejected:
		return true
	}
	return false
}

// Completion reasons.
const (
	CompletionAllCompleted     = "all_completed"
	CompletionMinGroups        = "min_groups_reached"
	CompletionDeadline         = "deadline_expired"
	CompletionMaxFailures      = "max_failures"
	CompletionFailureThreshold = "failure_threshold"
	CompletionFirstFailure     = "first_failure"
	CompletionItemStop         = "item_failure_stop"
	CompletionCancelled        = "cancelled"
)

// Where a jobs.status answer came from (JobStatus.Source).
const (
	// StatusFromRunner: the leading coordinator's live counts.
	StatusFromRunner = "runner"
	// StatusFromRecord: the job record, read from its stream's leader (at
	// most Config.StatusInterval behind the runner while the job runs).
	StatusFromRecord = "record"
)

// JobStatus is a job's status (docs/contract.md §7). When the job ends,
// Succeeded+DeadLettered+Skipped+NotRun+Failed == Items.
type JobStatus struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Pool string `json:"pool"`
	// Team is the team that submitted the job (JobSpec.Team), if any.
	Team  string `json:"team,omitempty"`
	State string `json:"state"`
	// PausedBy says what paused a job whose State is paused: PausedByJob
	// or PausedByPool.
	PausedBy     string `json:"paused_by,omitempty"`
	Items        int64  `json:"items"`
	Published    int64  `json:"published"`
	Succeeded    int64  `json:"succeeded"`
	Failed       int64  `json:"failed"`
	DeadLettered int64  `json:"dead_lettered"`
	Skipped      int64  `json:"skipped"`
	NotRun       int64  `json:"not_run"`
	Retries      int64  `json:"retries"`
	// ItemRetries counts the whole-item re-runs of the finished items
	// (error_policy.retry_config); they are among Retries too.
	ItemRetries      int64        `json:"item_retries,omitempty"`
	Budget           BudgetStatus `json:"budget"`
	CompletionReason string       `json:"completion_reason,omitempty"`
	// Success is false for a finished best-effort job with too few groups.
	Groups   map[string]GroupStatus `json:"groups,omitempty"`
	Problems []FieldError           `json:"problems,omitempty"`
	Errors   []ErrorSummary         `json:"errors,omitempty"`
	// ErrorsOther counts the failed items whose error signature is not in
	// Errors, which keeps only the most frequent signatures.
	ErrorsOther int64          `json:"errors_other,omitempty"`
	Breaker     *BreakerStatus `json:"breaker,omitempty"` // nil when the job has none
	LateResults int64          `json:"late_results,omitempty"`
	// Phase is setup, map, reduce or done (empty for old records = map).
	Phase string `json:"phase,omitempty"`
	// Setup is the outcome of the job's setup phase (nil without one).
	Setup *SetupStatus `json:"setup,omitempty"`
	// MapState and MapReason record how the map phase ended while the
	// reduce phase runs; State then stays running.
	MapState   string            `json:"map_state,omitempty"`
	MapReason  string            `json:"map_reason,omitempty"`
	BestEffort *BestEffortStatus `json:"best_effort,omitempty"`
	Reduce     *ReduceStatus     `json:"reduce,omitempty"`
	// AsOf is when these counts were true: the time of the request when
	// the leading coordinator answers from the job's runner, the time the
	// runner took the snapshot a job record holds otherwise. Of two
	// statuses of a job, the one with the later AsOf is the newer
	// (Client.Wait never goes back to an older one).
	AsOf *time.Time `json:"as_of,omitempty"`
	// Source is where a jobs.status answer came from: StatusFromRunner or
	// StatusFromRecord. Empty in a stored record.
	Source      string     `json:"source,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// CleanupAt is when the removal of the settled job's data (item state,
	// budget, breaker, results, inputs) began; CleanedAt when it ended.
	// From CleanupAt on, the job cannot be reopened by a DLQ replay: the
	// results its counts are rebuilt from are gone (docs/deploy.md, "Retention").
	CleanupAt *time.Time `json:"cleanup_at,omitempty"`
	CleanedAt *time.Time `json:"cleaned_at,omitempty"`
	// Unreachable lists the agents of the job's pool the hub has not heard
	// from lately, while the job is not finished (jobs.status only).
	Unreachable []UnreachableAgent `json:"unreachable_agents,omitempty"`
}

// Summary returns s without the lists whose size grows with the job (groups,
// errors, problems) and without the reduce step's output and error: what
// jobs.list returns for each job.
func (s JobStatus) Summary() JobStatus {
	s.Groups, s.Errors, s.Problems = nil, nil, nil
	if s.Reduce != nil {
		rd := *s.Reduce
		rd.Output, rd.Error = "", ""
		s.Reduce = &rd
	}
	if s.Setup != nil {
		su := *s.Setup
		su.Output, su.Error = "", ""
		s.Setup = &su
	}
	if s.BestEffort != nil {
		be := *s.BestEffort
		s.BestEffort = &be
	}
	if s.Breaker != nil {
		b := *s.Breaker
		s.Breaker = &b
	}
	return s
}

// Done is the number of items in a terminal state.
func (s *JobStatus) Done() int64 {
	return s.Succeeded + s.Failed + s.DeadLettered + s.Skipped + s.NotRun
}

// BudgetStatus is the job retry budget as seen in the status.
type BudgetStatus struct {
	Total            int    `json:"total"`
	PerItemMax       int    `json:"per_item_max"`
	Consumed         int    `json:"consumed"`
	Exhausted        bool   `json:"exhausted"`
	RequestedTotal   string `json:"requested_total,omitempty"`
	RequestedPerItem string `json:"requested_per_item,omitempty"`
	ClampedBy        string `json:"clamped_by,omitempty"`
	DeniedJob        int64  `json:"denied_job,omitempty"`
	DeniedItem       int64  `json:"denied_item,omitempty"`
}

// BreakerStatus is a job's circuit breaker as seen in the status.
type BreakerStatus struct {
	// State is closed, open or half_open.
	State string `json:"state"`
	// OpenedAt is when the breaker last opened.
	OpenedAt *time.Time `json:"opened_at,omitempty"`
	// Failures counts consecutive failures while closed.
	Failures int `json:"failures"`
	// Probes are the half-open probes admitted and not yet reported.
	Probes int `json:"probes,omitempty"`
	// Successes counts probe successes while half-open.
	Successes int `json:"successes,omitempty"`
}

// GroupStatus is the progress of one best-effort group.
type GroupStatus struct {
	Items     int64 `json:"items"`
	Done      int64 `json:"done"`
	Succeeded int64 `json:"succeeded"`
	// Failed counts the group's failed and dead-lettered items.
	Failed int64 `json:"failed,omitempty"`
}

// Complete reports whether every item of the group ended and none failed:
// the group counts toward best_effort.min_groups.
func (g GroupStatus) Complete() bool { return g.Items > 0 && g.Done >= g.Items && g.Failed == 0 }

// BestEffortStatus is the best-effort view of a job.
type BestEffortStatus struct {
	// MinGroups is the effective min_groups, clamped to [1, groups].
	MinGroups int `json:"min_groups"`
	// RequestedMinGroups is min_groups as submitted (0 = unset).
	RequestedMinGroups int `json:"requested_min_groups,omitempty"`
	// Clamped says why MinGroups differs from the request, if it does.
	Clamped         string `json:"clamped,omitempty"`
	Groups          int    `json:"groups"`
	GroupsCompleted int    `json:"groups_completed"`
	// Deadline is when the job completes with what it has; DeadlineAfter is
	// how long after its acceptance that is (the operator's default when
	// the spec set none), RequestedDeadline the spec's value ("" = unset).
	Deadline          *time.Time `json:"deadline,omitempty"`
	DeadlineAfter     Duration   `json:"deadline_after,omitempty"`
	RequestedDeadline string     `json:"requested_deadline,omitempty"`
	// ClampedBy names the operator's limit that lowered a requested value,
	// as the budget's: BEST_EFFORT_DEADLINE_MAX.
	ClampedBy   string `json:"clamped_by,omitempty"`
	LateResults string `json:"late_results"`
	// Success is whether at least MinGroups groups completed (set when the
	// job finished).
	Success bool `json:"success"`
}

// ReduceStatus is the outcome of a job's reduce phase.
type ReduceStatus struct {
	// State is pending (published, no result yet), succeeded or failed.
	State string `json:"state"`
	// Generation numbers the job's reduce runs (a DLQ replay that reopens
	// the job runs the reduce again); it is the reduce item's generation.
	Generation int    `json:"generation"`
	Output     string `json:"output,omitempty"`
	Error      string `json:"error,omitempty"`
	Agent      string `json:"agent,omitempty"`
}

// SetupStatus is the outcome of a job's setup phase.
type SetupStatus struct {
	// State is pending (published, no result yet), succeeded or failed.
	State string `json:"state"`
	// Step names the step that failed.
	Step   string `json:"step,omitempty"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// InputBytes is the size of the input the setup left.
	InputBytes int `json:"input_bytes,omitempty"`
}

// Job phases (and PhaseSetup).
const (
	PhaseMap = "map"
	// PhaseReducing: the map phase ended and the reduce item runs.
	PhaseReducing = "reduce"
	PhaseDone     = "done"
)

// ErrorSummary groups failed items by error signature (error_collection: aggregate).
type ErrorSummary struct {
	Signature string   `json:"signature"`
	Class     string   `json:"class,omitempty"`
	Message   string   `json:"message"`
	Count     int64    `json:"count"`
	Items     []string `json:"items,omitempty"`
}
