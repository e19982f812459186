package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const schedJob = `{"pool":"default","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`

func everySpec(name string, d time.Duration) messages.ScheduleSpec {
	return messages.ScheduleSpec{Name: name, Every: messages.Duration(d), Job: json.RawMessage(schedJob)}
}

// waitSchedule polls the schedule until ok accepts it.
func waitSchedule(t *testing.T, cl *Client, name string, ok func(*messages.Schedule) bool) *messages.Schedule {
	t.Helper()
	var s *messages.Schedule
	require.Eventually(t, func() bool {
		var err error
		s, err = cl.Schedule(context.Background(), name)
		return err == nil && ok(s)
	}, 20*time.Second, 20*time.Millisecond)
	return s
}

// The leader fires each tick of the coordinators' clock once, with a job
// id from the tick; a tick whose previous run still runs is skipped with
// its reason; a trigger starts a run at once; pause stops the ticks and
// resume counts those it missed.
func TestScheduleFiresOnTheLeadersClock(t *testing.T) {
	srv := fleettest.RunServer(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	_, p := startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()

	s, err := cl.ScheduleAdd(ctx, everySpec("tick", time.Minute))
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Minute), *s.NextRun)
	_, err = cl.ScheduleAdd(ctx, everySpec("tick", time.Minute))
	var apiErr *messages.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, messages.CodeConflict, apiErr.Code)

	clk.Advance(time.Minute)
	s = waitSchedule(t, cl, "tick", func(s *messages.Schedule) bool { return len(s.Runs) == 1 && s.Runs[0].Submitted })
	require.Equal(t, "tick-20260101t000100z", s.Runs[0].JobID)
	var st *messages.JobStatus
	require.Eventually(t, func() bool { st, err = cl.Status(ctx, "tick-20260101t000100z"); return err == nil }, 10*time.Second, 20*time.Millisecond)
	require.False(t, messages.TerminalState(st.State)) // no agent runs it

	// The next tick finds the run still going: overlap skip.
	clk.Advance(time.Minute)
	s = waitSchedule(t, cl, "tick", func(s *messages.Schedule) bool { return s.Skipped[messages.SkipOverlap] == 1 })
	require.Len(t, s.Runs, 1)
	require.Contains(t, s.Skips[0].Detail, "tick-20260101t000100z")

	// Paused, three ticks pass; resumed, they are one skip of three.
	_, err = cl.SchedulePause(ctx, "tick")
	require.NoError(t, err)
	clk.Advance(3 * time.Minute)
	s, err = cl.ScheduleResume(ctx, "tick")
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Skipped[messages.SkipPaused])
	require.Equal(t, t0.Add(6*time.Minute), *s.NextRun)

	id, err := cl.ScheduleTrigger(ctx, "tick")
	require.NoError(t, err)
	require.Contains(t, id, "tick-manual-")
	require.Eventually(t, func() bool { _, err := cl.Status(ctx, id); return err == nil }, 10*time.Second, 20*time.Millisecond)

	list, err := cl.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, cl.ScheduleRemove(ctx, "tick"))
	_, err = cl.Schedule(ctx, "tick")
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, messages.CodeNotFound, apiErr.Code)
}

func TestScheduleAddNamesTheField(t *testing.T) {
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	tests := []struct {
		name  string
		spec  messages.ScheduleSpec
		field string
	}{
		{"bad name", messages.ScheduleSpec{Name: "a.b", Every: messages.Duration(time.Minute), Job: json.RawMessage(schedJob)}, "name"},
		{"no timing", messages.ScheduleSpec{Name: "a", Job: json.RawMessage(schedJob)}, "cron"},
		{"both timings", messages.ScheduleSpec{Name: "a", Cron: "@daily", Every: messages.Duration(time.Minute), Job: json.RawMessage(schedJob)}, "every"},
		{"bad cron", messages.ScheduleSpec{Name: "a", Cron: "99 * * * *", Job: json.RawMessage(schedJob)}, "cron"},
		{"bad zone", messages.ScheduleSpec{Name: "a", Cron: "@daily", TZ: "Nowhere/Land", Job: json.RawMessage(schedJob)}, "tz"},
		{"bad overlap", messages.ScheduleSpec{Name: "a", Cron: "@daily", Overlap: "sometimes", Job: json.RawMessage(schedJob)}, "overlap"},
		{"no job", messages.ScheduleSpec{Name: "a", Cron: "@daily"}, "job"},
		{"job with id", messages.ScheduleSpec{Name: "a", Cron: "@daily", Job: json.RawMessage(`{"id":"x","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`)}, "job.id"},
		{"bad job", messages.ScheduleSpec{Name: "a", Cron: "@daily", Job: json.RawMessage(`{"items":[{"id":"a"}],"agent_template":[{"handler":"h","timeout":"soon"}]}`)}, "job.agent_template[0].timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cl.ScheduleAdd(context.Background(), tt.spec)
			var apiErr *messages.APIError
			require.True(t, errors.As(err, &apiErr), "%v", err)
			require.Equal(t, tt.field, apiErr.Field, apiErr.Message)
		})
	}
}

// Schedules are capped per pool: at MaxSchedulesPerPool a pool's next
// schedule is refused with too_many and the field, another pool's is
// still accepted, and removing one makes room.
func TestSchedulesAreCappedPerPool(t *testing.T) {
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{MaxSchedulesPerPool: 2, Pools: []string{"default", "gpu"}})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	for _, name := range []string{"s1", "s2"} {
		_, err := cl.ScheduleAdd(ctx, everySpec(name, time.Hour))
		require.NoError(t, err, name)
	}
	_, err = cl.ScheduleAdd(ctx, everySpec("s3", time.Hour))
	var apiErr *messages.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, messages.CodeTooMany, apiErr.Code)
	require.Equal(t, "job.pool", apiErr.Field)
	require.Contains(t, apiErr.Message, `pool "default" has 2 schedules; the limit is 2`)
	gpu := everySpec("g1", time.Hour)
	gpu.Job = json.RawMessage(`{"pool":"gpu","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`)
	_, err = cl.ScheduleAdd(ctx, gpu)
	require.NoError(t, err)
	require.NoError(t, cl.ScheduleRemove(ctx, "s1"))
	_, err = cl.ScheduleAdd(ctx, everySpec("s3", time.Hour))
	require.NoError(t, err)
}

// Ticks missed while no coordinator ran: the next leader fires only the
// most recent, late, and counts the others as missed; the restarted
// coordinators leave no goroutine of the scheduler behind.
func TestScheduleCatchUpAfterAnOutage(t *testing.T) {
	fleettest.VerifyNoLeaks(t)
	srv := fleettest.RunServer(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	_, p := startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cl.ScheduleAdd(ctx, everySpec("hb", 2*time.Second))
	require.NoError(t, err)
	p.stop(t)

	// A 10 s outage: ticks at +2 … +10 fall while no coordinator runs.
	clk.Advance(10*time.Second + 500*time.Millisecond)
	_, p = startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}})
	defer p.stop(t)
	s := waitSchedule(t, cl, "hb", func(s *messages.Schedule) bool { return len(s.Runs) == 1 && s.Runs[0].Submitted })
	require.Equal(t, t0.Add(10*time.Second), s.Runs[0].Tick)
	require.Equal(t, "hb-20260101t000010z", s.Runs[0].JobID)
	require.Equal(t, int64(1), s.Fired)
	require.Equal(t, int64(4), s.Skipped[messages.SkipMissed])
	require.Len(t, s.Skips, 1)
	require.Equal(t, t0.Add(2*time.Second), s.Skips[0].First)
	require.Equal(t, t0.Add(8*time.Second), s.Skips[0].Last)
}
