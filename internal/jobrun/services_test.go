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

// The coordinator gives the scheduler (internal/scheduler) its jobs: a
// schedule's job is checked as jobs.submit checks it, a tick's run is a
// job of the coordinator, and the run's state is that job's, so that the
// next tick finds it running and is skipped.
func TestSchedulesRunJobsOfTheCoordinator(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	_, p := startCoord(t, srv, Config{hooks: testhooks.Coordinator{Clock: clk}})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()

	bad := json.RawMessage(`{"items":[{"id":"a"}],"agent_template":[{"handler":"h","timeout":"soon"}]}`)
	_, err = cl.ScheduleAdd(ctx, messages.ScheduleSpec{Name: "bad", Cron: "@daily", Job: bad})
	var apiErr *messages.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, "job.agent_template[0].timeout", apiErr.Field, apiErr.Message)

	job := json.RawMessage(`{"pool":"default","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`)
	_, err = cl.ScheduleAdd(ctx, messages.ScheduleSpec{Name: "tick", Every: messages.Duration(time.Minute), Job: job})
	require.NoError(t, err)
	waitSchedule := func(ok func(*messages.Schedule) bool) *messages.Schedule {
		var s *messages.Schedule
		require.Eventually(t, func() bool {
			s, err = cl.Schedule(ctx, "tick")
			return err == nil && ok(s)
		}, 20*time.Second, 20*time.Millisecond)
		return s
	}
	clk.Advance(time.Minute)
	s := waitSchedule(func(s *messages.Schedule) bool { return len(s.Runs) == 1 && s.Runs[0].Submitted })
	id := s.Runs[0].JobID
	var st *messages.JobStatus
	require.Eventually(t, func() bool { st, err = cl.Status(ctx, id); return err == nil }, 10*time.Second, 20*time.Millisecond)
	require.False(t, messages.TerminalState(st.State)) // no agent runs it

	clk.Advance(time.Minute)
	s = waitSchedule(func(s *messages.Schedule) bool { return s.Skipped[messages.SkipOverlap] == 1 })
	require.Contains(t, s.Skips[0].Detail, id)
	require.NotEmpty(t, s.Runs[0].State)
	require.False(t, messages.TerminalState(s.Runs[0].State))
}
