package retry

import (
	"errors"
	"time"
)

// Plan is the retry timeline of a policy when every attempt fails at once
// (run time counts for nothing, as for the retry budget).
type Plan struct {
	// Delays are the backoffs before retries 1, 2, ….
	Delays []time.Duration
	// Total is the sum of Delays.
	Total time.Duration
	// StoppedBy is what ends the retries: messages.ReasonAttempts or
	// messages.ReasonRetryBudget.
	StoppedBy string
	// Refused is the delay the retry budget refused (StoppedBy retry_budget).
	Refused time.Duration
}

var errPlanned = errors.New("planned failure")

// Plan runs [Policy.Decide] over a simulated clock with failures that are
// always retryable, and returns the delays it grants and what stops them.
// r is the jitter source; use [Policy.WithoutJitter] for the documented
// timeline.
func (p *Policy) Plan(r Rand) Plan {
	now := time.Unix(0, 0).UTC()
	var st State
	plan := Plan{Delays: []time.Duration{}}
	planned := Assessment{err: errPlanned, class: ClassError, retryable: true}
	for {
		d := p.DecideAssessed(now, st, planned, r)
		if d.Action != ActionRetry {
			plan.StoppedBy, plan.Refused = d.Reason, d.Refused
			return plan
		}
		plan.Delays = append(plan.Delays, d.Delay)
		plan.Total = addSat(plan.Total, d.Delay)
		now = now.Add(d.Delay)
		st = d.State
	}
}
