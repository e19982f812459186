package itemrun

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/testhooks"
)

// TestPresenceListsTheBusiestJobs: past presenceJobs jobs in flight, the
// presence keeps the busiest, ties broken by job id.
func TestPresenceListsTheBusiestJobs(t *testing.T) {
	p := newPresence(New(nil, Config{Name: "a1", hooks: testhooks.Agent{Clock: clock.NewManual(t0)}}))
	// j00 … j24 with 1 … 25 items in flight, and z0, z1 with 6 each.
	for i := range 25 {
		for range i + 1 {
			p.begin(fmt.Sprintf("j%02d", i))
		}
	}
	for range 6 {
		p.begin("z0")
		p.begin("z1")
	}
	got := p.value().Jobs
	want := map[string]int64{}
	for i := 6; i < 25; i++ { // 7 … 25 in flight: 19 jobs
		want[fmt.Sprintf("j%02d", i)] = int64(i + 1)
	}
	want["j05"] = 6 // of the three with 6, the first by id
	require.Equal(t, want, got)
}
