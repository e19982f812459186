package simulate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// A dependency down for 30 seconds, 10 seconds into a job of 5,000 items on
// 4 agents × 8: without a job budget every item spends its 5 attempts,
// with a 10% budget the retries stop early and the dead letters say why.
func ExampleRun() {
	for _, budget := range []string{"100%", "10%"} {
		spec, err := jobspec.Parse([]byte(`
items: [{id: a}]
agent_template:
  - handler: call
    retry_config: {attempts: 5, backoff: exponential, initial_delay: 1s, max_delay: 30s}
retry_budget: "` + budget + `"
`))
		if err != nil {
			panic(err)
		}
		r, err := simulate.Run(context.Background(), simulate.Config{
			Spec:  spec,
			Items: 5000,
			Fleet: simulate.Fleet{Agents: 4, Concurrency: 8},
			Dependency: simulate.Dependency{
				StepDuration: 200 * time.Millisecond,
				OutageAt:     10 * time.Second, Outage: 30 * time.Second, ErrorRate: 1,
			},
		})
		if err != nil {
			panic(err)
		}
		during := r.Phases[1]
		fmt.Printf("retry_budget %s: %d calls (%.2f per item during the outage), %d retries of %d, %d dead-lettered %v, done in %s\n",
			budget, r.Attempts, during.Amplification, r.Retries, r.Budget.Total, r.DeadLettered, r.Reasons, r.Duration)
	}
	// Output:
	// retry_budget 100%: 9187 calls (3.95 per item during the outage), 4187 retries of 5000, 613 dead-lettered map[attempts:613], done in 57.6s
	// retry_budget 10%: 5500 calls (1.15 per item during the outage), 500 retries of 500, 3400 dead-lettered map[job_budget_exhausted:3400], done in 34.4s
}
