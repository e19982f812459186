package wire

import (
	"slices"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// SpecRecord is the value of a job's key in a pool's specs bucket
// (messages.Names.SpecsBucket): what the pool's agents need to run the
// job's items, and nothing of its outcome. The coordinator writes it for
// each pool the job's items go to before it publishes any of them; the
// job's status, errors and counts stay in its JobRecord, which agents do
// not read (docs/security.md, Threat model).
type SpecRecord struct {
	// V is the schema version (docs/contract.md §8).
	V    messages.Schema   `json:"v"`
	Spec *messages.JobSpec `json:"spec"`
	// Routes maps a group to the pool its items were routed to (JobRecord.Routes).
	Routes map[string]string `json:"routes,omitempty"`
	// BudgetTotal and BudgetPerItemMax are the job's effective retry
	// budget limits (JobStatus.Budget), BudgetShares each pool's share
	// (JobRecord.BudgetShares).
	BudgetTotal      int            `json:"budget_total"`
	BudgetPerItemMax int            `json:"budget_per_item_max,omitempty"`
	BudgetShares     map[string]int `json:"budget_shares,omitempty"`
	// Items is the job's item count (JobStatus.Items): 0 while its setup
	// phase runs, rewritten when its items are known.
	Items int64 `json:"items,omitempty"`
	// SetupCaptures are the variables the job's setup captured
	// (JobRecord.SetupCaptures): unset until its map phase starts.
	SetupCaptures map[string]*Capture `json:"setup_captures,omitempty"`
	// AcceptedAt is when the job was accepted (JobStatus.SubmittedAt): an
	// agent that heard a map_ended of an earlier job of the same id before
	// this time knows that event was not this job's.
	AcceptedAt time.Time `json:"accepted_at"`
}

// SpecOf is the spec record of rec.
func SpecOf(rec *JobRecord) SpecRecord {
	return SpecRecord{
		V: messages.SchemaVersion, Spec: rec.Spec, Routes: rec.Routes,
		BudgetTotal: rec.Status.Budget.Total, BudgetPerItemMax: rec.Status.Budget.PerItemMax,
		BudgetShares: rec.BudgetShares, Items: rec.Status.Items, AcceptedAt: rec.Status.SubmittedAt,
		SetupCaptures: rec.SetupCaptures,
	}
}

// JobPools are the pools rec's items go to: the job's pool and the pools
// its groups are routed to, the job's first and the others in order.
func JobPools(rec *JobRecord) []string {
	pool := messages.DefaultPool
	if rec.Spec != nil && rec.Spec.Pool != "" {
		pool = rec.Spec.Pool
	} else if rec.Status.Pool != "" {
		pool = rec.Status.Pool
	}
	pools := []string{pool}
	for _, p := range rec.Routes {
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	slices.Sort(pools[1:])
	return pools
}
