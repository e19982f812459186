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
// published by the agent whose write changed a job's circuit breaker.
type BreakerChangedEvent struct {
	JobID string `json:"job_id"`
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
