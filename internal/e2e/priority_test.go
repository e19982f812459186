package e2e

import (
	"context"
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

// A priority-9 job of 100 items submitted while a large priority-5 job
// runs in the same pool finishes within 5 s: it starts behind at most the
// large job's queue share, and the large job's share shrinks to a
// sixteenth while the urgent one publishes (docs/jobs.md "Priorities").
// The 200,000-item variant runs without -race; the 20,000-item one always.
func TestPriorityJobOvertakesBatch(t *testing.T) {
	for _, big := range []int{20_000, 200_000} {
		t.Run(strconv.Itoa(big), func(t *testing.T) {
			if big > 20_000 && (raceEnabled || testing.Short()) {
				t.Skip("200,000 items: run without -race and -short")
			}
			testPriorityOvertakes(t, big)
		})
	}
}

func testPriorityOvertakes(t *testing.T, big int) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteByte('[')
	for i := range big {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteByte(']')
	require.NoError(t, os.WriteFile(filepath.Join(dir, "batch.json"), []byte(b.String()), 0o600))

	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), InputDir: dir})
	for i := range 2 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 8}, nil)
	}
	cl := client(t, srv)
	batch := submit(t, cl, `{"id": "batch", "input": "batch.json", "agent_template": [{"handler": "noop"}]}`)
	waitDone(t, cl, batch, 2_000) // the batch runs, its queue share full

	items := make([]string, 100)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	t0 := time.Now()
	urgent := submit(t, cl, `{"id": "urgent", "priority": 9, "items": [`+strings.Join(items, ",")+`], "agent_template": [{"handler": "noop"}]}`)
	st := waitJob(t, cl, urgent, time.Minute)
	took := time.Since(t0)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 100, st.Succeeded)
	t.Logf("priority-9 job of 100 items done in %v beside a %d-item batch", took.Round(time.Millisecond), big)
	require.Less(t, took, 5*time.Second, "the urgent job waited behind the batch")

	bst, err := cl.JobStatus(context.Background(), batch)
	require.NoError(t, err)
	if !messages.TerminalState(bst.State) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = cl.JobCancel(ctx, batch)
		require.NoError(t, err)
	}
}
