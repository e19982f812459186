package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func everySched(t *testing.T, d time.Duration, overlap string, catchup time.Duration) (messages.Schedule, *Timing) {
	t.Helper()
	tm, err := NewEvery(d, t0)
	require.NoError(t, err)
	c := messages.Duration(catchup)
	return messages.Schedule{
		ScheduleSpec: messages.ScheduleSpec{Name: "nightly", Every: messages.Duration(d), Overlap: overlap, Catchup: &c},
		CreatedAt:    t0, LastTick: t0,
	}, tm
}

func TestPlanFiresEachTickOnce(t *testing.T) {
	s, tm := everySched(t, 2*time.Second, "", time.Hour)
	_, fire, changed := Plan(s, tm, t0.Add(1999*time.Millisecond), false)
	require.False(t, changed)
	require.Empty(t, fire)

	now := t0.Add(2100 * time.Millisecond)
	s, fire, changed = Plan(s, tm, now, false)
	require.True(t, changed)
	require.Len(t, fire, 1)
	require.Equal(t, "nightly-20260501t120002z", fire[0].JobID)
	require.False(t, fire[0].Late)
	require.Equal(t, t0.Add(2*time.Second), s.LastTick)

	// The same tick planned again (a second leader, a retry) fires nothing.
	_, fire, changed = Plan(s, tm, now, false)
	require.False(t, changed)
	require.Empty(t, fire)
}

func TestPlanCatchUpFiresOnlyTheMostRecentMissedTick(t *testing.T) {
	s, tm := everySched(t, 2*time.Second, "", time.Hour)
	// A 10 s outage: ticks at +2 … +10 were due.
	now := t0.Add(10*time.Second + 300*time.Millisecond)
	s, fire, _ := Plan(s, tm, now, false)
	require.Len(t, fire, 1)
	require.Equal(t, t0.Add(10*time.Second), fire[0].Tick)
	require.Len(t, s.Skips, 1)
	require.Equal(t, messages.ScheduleSkip{First: t0.Add(2 * time.Second), Last: t0.Add(8 * time.Second), Count: 4,
		Reason: messages.SkipMissed, Detail: s.Skips[0].Detail, At: now}, s.Skips[0])
	require.Equal(t, int64(4), s.Skipped[messages.SkipMissed])
}

func TestPlanBeyondCatchUpSkipsEverything(t *testing.T) {
	s, tm := everySched(t, time.Hour, "", 5*time.Minute)
	now := t0.Add(3*time.Hour + 10*time.Minute)
	s, fire, _ := Plan(s, tm, now, false)
	require.Empty(t, fire)
	require.Equal(t, int64(3), s.Skipped[messages.SkipMissed])
	require.Contains(t, s.Skips[1].Detail, "beyond the catch-up window of 5m0s")
	require.Equal(t, t0.Add(3*time.Hour), s.LastTick)
}

func TestPlanLateTickWithinCatchUpIsMarkedLate(t *testing.T) {
	s, tm := everySched(t, time.Hour, "", time.Hour)
	_, fire, _ := Plan(s, tm, t0.Add(time.Hour+20*time.Minute), false)
	require.Len(t, fire, 1)
	require.True(t, fire[0].Late)
}

func TestPlanOverlap(t *testing.T) {
	t.Run("skip records why", func(t *testing.T) {
		s, tm := everySched(t, 2*time.Second, messages.OverlapSkip, time.Hour)
		s, _, _ = Plan(s, tm, t0.Add(2*time.Second), false)
		s, fire, _ := Plan(s, tm, t0.Add(4*time.Second), true)
		require.Empty(t, fire)
		require.Equal(t, messages.SkipOverlap, s.Skips[0].Reason)
		require.Contains(t, s.Skips[0].Detail, "nightly-20260501t120002z")
		require.Equal(t, int64(1), s.Skipped[messages.SkipOverlap])
	})
	t.Run("queue holds one tick until the run ends", func(t *testing.T) {
		s, tm := everySched(t, 2*time.Second, messages.OverlapQueue, time.Hour)
		s, _, _ = Plan(s, tm, t0.Add(2*time.Second), false)
		s, fire, _ := Plan(s, tm, t0.Add(4*time.Second), true)
		require.Empty(t, fire)
		s, fire, _ = Plan(s, tm, t0.Add(6*time.Second), true)
		require.Empty(t, fire)
		require.Equal(t, messages.SkipQueued, s.Skips[0].Reason)
		require.Equal(t, t0.Add(6*time.Second), *s.Queued)
		s, fire, changed := Plan(s, tm, t0.Add(7*time.Second), false)
		require.True(t, changed)
		require.Len(t, fire, 1)
		require.Equal(t, t0.Add(6*time.Second), fire[0].Tick)
		require.Nil(t, s.Queued)
	})
	t.Run("allow fires", func(t *testing.T) {
		s, tm := everySched(t, 2*time.Second, messages.OverlapAllow, time.Hour)
		_, fire, _ := Plan(s, tm, t0.Add(2*time.Second), true)
		require.Len(t, fire, 1)
	})
}

func TestPlanPausedDoesNothing(t *testing.T) {
	s, tm := everySched(t, 2*time.Second, "", time.Hour)
	s.Paused = true
	_, fire, changed := Plan(s, tm, t0.Add(time.Minute), false)
	require.False(t, changed)
	require.Empty(t, fire)
}
