package retry

import (
	"errors"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Plan is the retry timeline of a policy when every attempt fails with a
// retryable error, each run taking the same time (none by default: run
// time does not change what a retry_budget allows).
type Plan struct {
	// Delays are the backoffs before retries 1, 2, ….
	Delays []time.Duration
	// Total is the sum of Delays.
	Total time.Duration
	// Elapsed is the wall-clock time from the first run's start to the
	// give-up: the runs and the delays between them.
	Elapsed time.Duration
	// StoppedBy is what ends the retries: messages.ReasonAttempts,
	// ReasonRetryBudget, or ReasonAgentTimeout (with PlanOptions.AgentTimeout).
	StoppedBy string
	// Refused is the delay the retry budget, or the agent_timeout, refused
	// (0 when a run was cut by the agent_timeout).
	Refused time.Duration
}

// PlanOptions are what a plan assumes besides the policy.
type PlanOptions struct {
	// RunTime is how long each run takes before it fails. Defaults to 0.
	RunTime time.Duration
	// AgentTimeout is the job's agent_timeout: the item's run ends when a
	// retry would come back with it passed, or a run outlasts it. 0 = none.
	AgentTimeout time.Duration
}

var errPlanned = errors.New("planned failure")

// Plan runs [Policy.Decide] over a simulated clock with failures that are
// always retryable and take no time, and returns the delays it grants and
// what stops them. r is the jitter source; use [Policy.WithoutJitter] for
// the documented timeline.
func (p *Policy) Plan(r Rand) Plan { return p.PlanWith(r, PlanOptions{}) }

// PlanWith is [Policy.Plan] with runs of o.RunTime and an agent_timeout of
// o.AgentTimeout, decided as the agent decides them: the retry budget and
// the policy first, then the [Deadline] (a retry that would come back with
// the time up, or a run cut by it).
func (p *Policy) PlanWith(r Rand, o PlanOptions) Plan {
	start := time.Unix(0, 0).UTC()
	deadline := NewDeadline(start, o.AgentTimeout)
	now := start
	var st State
	plan := Plan{Delays: []time.Duration{}}
	planned := Assessment{err: errPlanned, class: ClassError, retryable: true}
	for {
		if deadline.Passed(now.Add(max(o.RunTime, 0))) { // the run is cut when the time is up
			plan.StoppedBy, plan.Elapsed = messages.ReasonAgentTimeout, deadline.At().Sub(start)
			return plan
		}
		now = now.Add(max(o.RunTime, 0))
		d := p.DecideAssessed(now, st, planned, r)
		plan.Elapsed = now.Sub(start)
		switch {
		case d.Action != ActionRetry:
			plan.StoppedBy, plan.Refused = d.Reason, d.Refused
			return plan
		case deadline.Refuses(now, d.Delay):
			plan.StoppedBy, plan.Refused = messages.ReasonAgentTimeout, d.Delay
			return plan
		}
		plan.Delays = append(plan.Delays, d.Delay)
		plan.Total = addSat(plan.Total, d.Delay)
		now = now.Add(d.Delay)
		st = d.State
	}
}
