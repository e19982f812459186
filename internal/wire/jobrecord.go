package wire

import (
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// JobRecord is the value of a job's key in the fleet_jobs bucket: the spec
// as accepted (effective values), the status, and the coordinator's
// publishing cursor. Agents read the spec from it; status readers the status.
type JobRecord struct {
	// V is the schema version (docs/contract.md §8).
	V      messages.Schema    `json:"v"`
	Spec   *messages.JobSpec  `json:"spec,omitempty"`
	Status messages.JobStatus `json:"status"`
	// Cursor is the number of input items (in input order) whose publication
	// has been acknowledged by the work stream.
	Cursor int64 `json:"cursor"`
	// Deadline is the absolute best-effort deadline, fixed at acceptance so a
	// coordinator restart neither extends nor loses it.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Routes maps a group to the pool its items were routed to (group_by).
	Routes map[string]string `json:"routes,omitempty"`
	// BudgetShares is each pool's share of the job's retry budget
	// (Status.Budget.Total), in proportion to its items: a pool's agents
	// may spend only their pool's share (a job of one pool has it all).
	// Unset in a record of an earlier version, whose budget was one key.
	BudgetShares map[string]int `json:"budget_shares,omitempty"`
	// SetupCaptures are the variables the job's setup steps captured
	// (docs/job-spec.md, "The setup phase"), set when its map phase starts:
	// every map and reduce item starts with them. Bounded as an item's
	// captures are, by MaxCaptureBytes.
	SetupCaptures map[string]*Capture `json:"setup_captures,omitempty"`
	// SubmitSeq is the sequence of the job's submission in the jobs
	// stream, deleted with the record when the job expires.
	SubmitSeq uint64 `json:"submit_seq,omitempty"`
	// Trace is the W3C traceparent of the job's acceptance (when it was
	// traced): its items' and reduce's spans join that trace.
	Trace string `json:"trace,omitempty"`
}
