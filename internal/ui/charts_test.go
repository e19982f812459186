package ui

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestShortDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {500 * time.Microsecond, "<1ms"}, {450 * time.Millisecond, "450ms"}, {3200 * time.Millisecond, "3.2s"},
		{42 * time.Second, "42s"}, {4*time.Minute + 10*time.Second, "4m10s"}, {5 * time.Minute, "5m"},
		{2*time.Hour + 5*time.Minute, "2h5m"}, {76 * time.Hour, "3d4h"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, shortDuration(tt.d), tt.d)
	}
	require.Equal(t, 30*time.Millisecond, roundSpan(30400*time.Microsecond, 31*time.Millisecond))
	require.Equal(t, 1300*time.Millisecond, roundSpan(1340*time.Millisecond, 5*time.Second))
	require.Equal(t, 4*time.Minute+10*time.Second, roundSpan(4*time.Minute+12*time.Second, 10*time.Minute))
}

func TestStackBarAddsUp(t *testing.T) {
	st := &messages.JobStatus{Items: 200, Published: 150, Succeeded: 90, DeadLettered: 5, Failed: 3, Skipped: 2}
	segs := stackBar(st)
	require.Len(t, segs, 5, "succeeded, dlq, failed, skipped, in flight")
	total := 0.0
	for i, s := range segs {
		if i > 0 {
			require.InDelta(t, segs[i-1].X+segs[i-1].W, s.X, 1e-9, "segments follow each other")
		}
		total += s.W
	}
	require.InDelta(t, 75, total, 1e-9, "150 of 200 items published")
	require.Equal(t, "50 in flight", segs[4].Title)
	require.Empty(t, stackBar(&messages.JobStatus{}))
}

func TestHistogramThinsItsLabels(t *testing.T) {
	counts := make([]int64, len(durationBounds)+1)
	counts[3] = 7
	c := histogram(halfWidth, counts, durationLabels(), "dur", "items")
	require.Len(t, c.Bars, len(counts))
	require.Equal(t, "7", c.YMax)
	require.Less(t, len(c.XTicks), len(counts), "not every label fits")
	for i := 1; i < len(c.XTicks); i++ {
		require.GreaterOrEqual(t, c.XTicks[i].X-c.XTicks[i-1].X, minLabelGap)
	}
	require.InDelta(t, c.Top, c.Bars[3].Y, 1e-9, "the largest bar is full height")
	require.True(t, histogram(halfWidth, make([]int64, 4), []string{"a", "b", "c", "d"}, "x", "y").Empty)
}

// The timeline's bins double in width as the job outlasts them, keeping
// every result counted.
func TestJobStatsTimelineWidens(t *testing.T) {
	s := newJobStats()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 1000 {
		s.add(&messages.Result{Outcome: messages.OutcomeSucceeded, Attempts: 1 + i%3, Retries: i % 3, FinishedAt: t0.Add(time.Duration(i) * 100 * time.Millisecond), DurationMS: int64(i)})
	}
	s.add(&messages.Result{Outcome: messages.OutcomeReopened, FinishedAt: t0})
	s.add(&messages.Result{Outcome: messages.OutcomeSucceeded, Phase: messages.PhaseReduce, FinishedAt: t0})
	v := s.view()
	require.EqualValues(t, 1000, v.Read, "reopen markers and the reduce are not item results")
	require.Equal(t, 3200*time.Millisecond, v.Width, "100 s over 60 bins: 100ms doubled five times")
	var done, retries int64
	for _, b := range v.Bins {
		done += b.Done
		retries += b.Retries
	}
	require.EqualValues(t, 1000, done)
	require.EqualValues(t, 999, retries)
	require.Len(t, v.Steps, 1)
	require.EqualValues(t, [maxRuns + 1]int64{0, 334, 333, 333}, v.Steps[0].Runs)
	c := timelineChart(v)
	require.False(t, c.Empty)
	require.Len(t, c.Lines, 1)
	require.Equal(t, "start", c.XTicks[0].Anchor)
	require.Equal(t, "end", c.XTicks[len(c.XTicks)-1].Anchor)
}

func TestAttemptTimeline(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	atts := []messages.Attempt{
		{Attempt: 1, Time: t0.Add(100 * time.Millisecond), DurationMS: 100, ErrorClass: "network", Decision: "retry", DelayMS: 1000},
		{Attempt: 2, Time: t0.Add(1200 * time.Millisecond), DurationMS: 100, ErrorClass: "timeout", Decision: "give_up"},
		{Attempt: 3, Generation: 1, Time: t0.Add(3 * time.Second), DurationMS: 500, ErrorClass: "weird<class>", Decision: "give_up"},
	}
	tl := attemptTimeline(atts, t0.Add(3*time.Second))
	require.Len(t, tl.Runs, 3)
	require.Len(t, tl.Delays, 1)
	require.Len(t, tl.Marks, 1, "the replay starts generation 1")
	require.Equal(t, "run error", tl.Runs[2].Class, "an unknown class is not a CSS token")
	require.InDelta(t, 10, tl.Runs[0].X, 1e-9)
	require.Less(t, tl.Runs[0].X+tl.Runs[0].W, tl.Delays[0].X+1e-9)
	require.True(t, attemptTimeline(nil, t0).Empty)
}

// The breaker history reads the agents' CircuitBreakerStateChanged events
// of one job, whatever pool published them, and keeps the last ones.
func TestBreakerHistory(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx := t.Context()
	names := messages.MustNames("")
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, provision.Config{}))
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	publish := func(pool, job, from, to string, i int) {
		data, _ := json.Marshal(map[string]any{"from": from, "to": to, "failures": i, "agent": "a-" + pool})
		body, _ := json.Marshal(messages.Event{Type: "CircuitBreakerStateChanged", JobID: job, Time: t0.Add(time.Duration(i) * time.Second), Data: data})
		_, err := srv.JS().Publish(ctx, wire.AgentEventSubject(names, pool, job, messages.EventBreaker), body)
		require.NoError(t, err)
	}
	none, more, err := breakerHistory(ctx, srv.JS(), names, "quiet")
	require.NoError(t, err)
	require.Empty(t, none)
	require.False(t, more)
	for i := range breakerKept + 5 {
		pool := []string{"default", "gpu"}[i%2]
		publish(pool, "flappy", "closed", "open", i)
		publish(pool, "other", "open", "closed", i)
	}
	got, more, err := breakerHistory(ctx, srv.JS(), names, "flappy")
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, got, breakerKept, "the last ones")
	require.Equal(t, 5, got[0].Failures)
	require.Equal(t, breakerKept+4, got[len(got)-1].Failures)
	require.Equal(t, "open", got[0].To)
	require.Equal(t, "a-gpu", got[0].Agent)
	require.Equal(t, t0.Add(5*time.Second), got[0].Time)
}
