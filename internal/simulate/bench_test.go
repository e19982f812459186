package simulate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// benchSpec is a realistic job: one handler step calling the dependency,
// exponential backoff with jitter, a 10% job budget.
const benchSpec = `
id: bench
items: [{id: a}]
agent_template:
  - handler: call
    retry_config: {attempts: 5, initial_delay: 1s, max_delay: 30s, jitter: true}
retry_budget: "10%"
`

// BenchmarkMillionItems simulates 1,000,000 items through a 2-minute
// outage on a fleet of 50 agents × 20; the figure of merit is ns/item
// (the done-criterion is a million items in under 10 s on 2 cores).
func BenchmarkMillionItems(b *testing.B) {
	spec, err := jobspec.Parse([]byte(benchSpec))
	require.NoError(b, err)
	cfg := simulate.Config{
		Spec: spec, Items: 1_000_000,
		Fleet:      simulate.Fleet{Agents: 50, Concurrency: 20},
		Dependency: simulate.Dependency{StepDuration: 200 * time.Millisecond, OutageAt: 30 * time.Second, Outage: 2 * time.Minute, ErrorRate: 1},
	}
	b.ReportAllocs()
	var r *simulate.Result
	for b.Loop() {
		r, err = simulate.Run(context.Background(), cfg)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cfg.Items), "ns/item")
	b.ReportMetric(float64(r.Attempts), "attempts")
}
