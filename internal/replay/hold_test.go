package replay

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// jobs records what the replays ask of the coordinator's jobs.
type jobs struct {
	mu       sync.Mutex
	rechecks []string
}

func (j *jobs) Recheck(job string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rechecks = append(j.rechecks, job)
}

func (j *jobs) Event(string, messages.EventPayload) {}
func (j *jobs) ForgetPools([]string)                {}

// Two replays over one job hold it until both end: only the last release
// lets it complete (one recheck), and a term's end drops every hold.
func TestReplaysHoldTheirJobsUntilTheLastEnds(t *testing.T) {
	j := &jobs{}
	s := New(Config{Jobs: j})
	s.holdJobs([]string{"a", "b"})
	s.holdJobs([]string{"a"})
	require.True(t, s.Holding("a"))
	require.True(t, s.Holding("b"))
	require.False(t, s.Holding("c"))

	s.releaseJobs([]string{"a", "b"})
	require.True(t, s.Holding("a"), "the second replay still holds it")
	require.False(t, s.Holding("b"))
	require.Equal(t, []string{"b"}, j.rechecks)

	s.releaseJobs([]string{"a"})
	require.False(t, s.Holding("a"))
	require.Equal(t, []string{"b", "a"}, j.rechecks)

	s.holdJobs([]string{"c"})
	s.DropHolds()
	require.False(t, s.Holding("c"))
}
