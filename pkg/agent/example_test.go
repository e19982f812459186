package agent_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

var errThrottled = errors.New("429 too many requests")

// A handler steers retries with marker errors: a bad item is permanent,
// a throttled call asks to be retried after the server's delay.
func ExampleHandlerFunc() {
	upload := func(_ context.Context, c *agent.Call) (any, error) {
		var item struct{ Path string }
		if err := c.Decode(&item); err != nil || item.Path == "" {
			return nil, retry.Permanent(fmt.Errorf("item %s has no path", c.ItemID))
		}
		if c.Attempt == 1 {
			return nil, retry.After(30*time.Second, errThrottled)
		}
		return "uploaded " + item.Path, nil
	}

	for attempt, raw := range []string{`{"path": "a.jpg"}`, `{"path": "a.jpg"}`, `{}`} {
		out, err := upload(context.Background(), &agent.Call{ItemID: "x", Attempt: attempt + 1, Item: []byte(raw)})
		d, after := retry.AfterDelay(err)
		fmt.Printf("attempt %d: out=%v permanent=%v retry_after=%v(%s)\n", attempt+1, out, retry.IsPermanent(err), after, d)
	}
	// Output:
	// attempt 1: out=<nil> permanent=false retry_after=true(30s)
	// attempt 2: out=uploaded a.jpg permanent=false retry_after=false(0s)
	// attempt 3: out=<nil> permanent=true retry_after=false(0s)
}

// The verdict on a failed step run: the policy would retry after 2s, and
// what becomes of it depends on the delivery and the job's retry budget.
func ExampleStepFailure() {
	p, _ := retry.NewPolicy(nil) // 3 attempts, exponential from 1s
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	first := retry.State{Attempts: 1, FirstFailure: now, DelaySpent: time.Second, LastDelay: time.Second}
	d := p.Decide(now, first, retry.Failure{Err: errThrottled}, nil)

	for _, f := range []agent.StepFailure{
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
