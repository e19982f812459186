package failure_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var errThrottled = errors.New("429 too many requests")

// The verdict on a failed step run: the policy would retry after 2s, and
// what becomes of it depends on the delivery and the job's retry budget.
func ExampleStepFailure() {
	p, _ := retry.NewPolicy(nil) // 3 attempts, exponential from 1s
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	first := retry.State{Attempts: 1, FirstFailure: now, DelaySpent: time.Second, LastDelay: time.Second}
	d := p.Decide(now, first, retry.Failure{Err: errThrottled}, nil)

	for _, f := range []failure.StepFailure{
		{Decision: d, Grant: budget.Grant{Granted: true}},
		{Decision: d, Grant: budget.Grant{Deny: &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 100, Limit: 100}}},
		{Decision: d, LastDelivery: true},
	} {
		v := f.Verdict()
		fmt.Printf("needs a claim: %-5v → %-7v delay %-2s reason %q\n", f.NeedsClaim(), v.Kind, v.Delay, v.Reason)
	}
	// Output:
	// needs a claim: true  → retry   delay 2s reason ""
	// needs a claim: true  → give_up delay 0s reason "job_budget_exhausted"
	// needs a claim: false → give_up delay 0s reason "max_deliveries"
}
