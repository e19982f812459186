package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Beside a running batch, a job of 3,000 items finishes sooner at
// priority 9 than at the batch's priority 5: it gets the larger share of
// the pool's throughput (docs/jobs.md "Priorities"). The two runs
// alternate on one fleet, so the machine's load weighs on both alike;
// the test logs the ratio.
func TestPriorityTakesTheLargerShare(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("timing comparison: run without -race and -short")
	}
	dir := t.TempDir()
	items := make([]string, 200_000)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "batch.json"), []byte("["+strings.Join(items, ",")+"]"), 0o600))
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), InputDir: dir})
	for i := range 2 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 8}, nil)
	}
	cl := client(t, srv)
	batch := submit(t, cl, `{"id": "batch", "input": "batch.json", "agent_template": [{"handler": "noop"}]}`)
	waitDone(t, cl, batch, 2_000)

	run := func(name string, priority int) time.Duration {
		t0 := time.Now()
		id := submit(t, cl, fmt.Sprintf(`{"id": %q, "priority": %d, "items": %s, "agent_template": [{"handler": "noop"}]}`, name, priority, inlineItems(3000)))
		st := waitJob(t, cl, id, 2*time.Minute)
		require.Equal(t, messages.StateSucceeded, st.State)
		return time.Since(t0)
	}
	var high, equal time.Duration
	for i := range 2 {
		equal += run(fmt.Sprintf("equal-%d", i), 5)
		high += run(fmt.Sprintf("high-%d", i), 9)
	}
	t.Logf("3,000 items beside a batch: priority 9 took %v, priority 5 %v (ratio %.2f)", high.Round(time.Millisecond), equal.Round(time.Millisecond), float64(high)/float64(equal))
	require.Less(t, high, equal, "priority 9 was not served first")
}
