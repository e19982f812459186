package retry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/seedcases"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// Every worked timeline of the source documents, as the pure plan gives it
// (docs/retries.md, "Differences from the source documents", says why some
// differ from the document's own numbers).
func TestSeedTimelinesPlan(t *testing.T) {
	for _, tl := range seedcases.Timelines() {
		t.Run(tl.Name(), func(t *testing.T) {
			rc, err := jobspec.ParseRetryConfig([]byte(tl.Config))
			require.NoError(t, err)
			p, err := retry.NewPolicy(rc)
			require.NoError(t, err)
			plan := p.WithoutJitter().PlanWith(nil, retry.PlanOptions{RunTime: tl.RunTime, AgentTimeout: tl.AgentTimeout})
			require.Equal(t, tl.Delays, plan.Delays)
			require.Equal(t, tl.StoppedBy, plan.StoppedBy)
			if tl.Difference == "" {
				require.Equal(t, tl.SeedDelays, plan.Delays, "the document's own numbers")
			} else {
				require.NotEqual(t, tl.SeedDelays, plan.Delays, "a difference the docs explain")
			}
		})
	}
}
