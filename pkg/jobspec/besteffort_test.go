package jobspec

import (
	"testing"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A best_effort block without a deadline gets AD-44's 300 s; the operator
// sets other defaults and a cap, which the job's status records.
func TestBestEffortSettingsApply(t *testing.T) {
	tests := []struct {
		name          string
		s             BestEffortSettings
		req           messages.BestEffort
		wantMin       int
		wantDeadline  time.Duration
		wantClampedBy string
	}{
		{"out of the box", BestEffortSettings{}, messages.BestEffort{}, 1, 5 * time.Minute, ""},
		{"requested values kept", BestEffortSettings{}, messages.BestEffort{MinGroups: 3, Deadline: messages.MustDuration("1h")}, 3, time.Hour, ""},
		{"operator defaults", BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 10 * time.Minute}, messages.BestEffort{}, 2, 10 * time.Minute, ""},
		{"requested deadline clamped", BestEffortSettings{DeadlineMax: time.Minute}, messages.BestEffort{Deadline: messages.MustDuration("10m")}, 1, time.Minute, ClampedByDeadlineMax},
		{"default under the cap", BestEffortSettings{DeadlineDefault: 30 * time.Second, DeadlineMax: time.Minute}, messages.BestEffort{}, 1, 30 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &messages.JobSpec{BestEffort: &tt.req}
			eff := WithDefaults(spec).BestEffort
			got := tt.s.Apply(spec.BestEffort, eff)
			if eff.MinGroups != tt.wantMin || eff.Deadline.D() != tt.wantDeadline || got != tt.wantClampedBy {
				t.Fatalf("Apply: min_groups %d, deadline %s, clamped by %q; want %d, %s, %q",
					eff.MinGroups, eff.Deadline, got, tt.wantMin, messages.Duration(tt.wantDeadline), tt.wantClampedBy)
			}
		})
	}
	if got := (BestEffortSettings{}).Apply(nil, nil); got != "" {
		t.Fatalf("no block: %q", got)
	}
}
