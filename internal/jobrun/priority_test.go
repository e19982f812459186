package jobrun

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limit  int64
		p, top int
		want   int64
	}{
		{"the top priority has the whole share", 1000, 9, 9, 1000},
		{"alone at the default", 1000, 5, 5, 1000},
		{"one step below: half", 1000, 8, 9, 500},
		{"four steps below: a sixteenth", 1000, 5, 9, 62},
		{"five steps below: the floor", 1000, 4, 9, 31},
		{"nine steps below: still the floor", 1000, 0, 9, 31},
		{"never below one", 10, 0, 9, 1},
		{"above the top (a stale top): the whole share", 1000, 9, 5, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, share(tt.limit, tt.p, tt.top))
		})
	}
}

func TestPrioritiesTop(t *testing.T) {
	t.Parallel()
	var ps priorities
	require.Equal(t, 0, ps.top([]string{"default"}), "none publishing")
	low := ps.add([]string{"default"}, 5)
	high := ps.add([]string{"default", "gpu"}, 9)
	other := ps.add([]string{"cpu"}, 7)
	require.Equal(t, 9, ps.top([]string{"default"}))
	require.Equal(t, 9, ps.top([]string{"gpu"}))
	require.Equal(t, 7, ps.top([]string{"cpu"}), "pools do not see each other's jobs")
	require.Equal(t, 9, ps.top([]string{"cpu", "gpu"}), "a job of two pools sees both")
	high()
	high() // idempotent
	require.Equal(t, 5, ps.top([]string{"default"}))
	require.Equal(t, 0, ps.top([]string{"gpu"}))
	low()
	other()
	require.Empty(t, ps.active, "nothing left once every job stopped publishing")
}

// The queue's share follows the priorities publishing in the job's pools:
// a batch's queue is full at a sixteenth of JobQueue while a job four
// priorities higher publishes, and at all of it again after.
func TestQueueShareFollowsPriorities(t *testing.T) {
	t.Parallel()
	var ps priorities
	pools := []string{"default"}
	q := queue{limit: 1000, share: func(limit int64) int64 { return share(limit, 5, ps.top(pools)) }}
	defer ps.add(pools, 5)()
	require.False(t, q.full(999, 0))
	require.True(t, q.full(1000, 0))

	urgent := ps.add(pools, 9)
	require.True(t, q.full(62, 0), "the batch yields to the urgent job")
	require.False(t, q.full(61, 0))
	urgent()
	require.False(t, q.full(62, 0), "the full share once the urgent job published everything")
}
