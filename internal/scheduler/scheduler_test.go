package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const schedJob = `{"pool":"default","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`

func everySpec(name string, d time.Duration) messages.ScheduleSpec {
	return messages.ScheduleSpec{Name: name, Every: messages.Duration(d), Job: json.RawMessage(schedJob)}
}

// jobs is the coordinator's side as the scheduler sees it: a job it
// submits runs until the test ends it; a spec is checked by jobspec.
type jobs struct {
	mu    sync.Mutex
	state map[string]string
}

func (j *jobs) Submit(_ context.Context, spec []byte) *messages.APIError {
	var s struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(spec, &s); err != nil || s.ID == "" {
		return &messages.APIError{Code: messages.CodeBadRequest, Message: "no id"}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.state[s.ID] = messages.StateRunning
	return nil
}

func (j *jobs) CheckSpec(spec json.RawMessage) (*messages.JobSpec, []messages.FieldError) {
	s, err := jobspec.Parse(spec)
	var ve *messages.ValidationError
	switch {
	case errors.As(err, &ve):
		return s, ve.Problems
	case err != nil:
		return s, []messages.FieldError{{Message: err.Error()}}
	}
	return s, nil
}

func (j *jobs) JobState(_ context.Context, id string) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st, ok := j.state[id]
	if !ok {
		return "", ErrNoJob
	}
	return st, nil
}

func (j *jobs) has(id string) bool {
	_, err := j.JobState(context.Background(), id)
	return err == nil
}

// harness is a scheduler on a test server, with the schedules bucket.
type harness struct {
	sc   *Scheduler
	jobs *jobs
}

func newHarness(t *testing.T, srv *fleettest.Server, clk clock.Clock, maxPerPool int) *harness {
	t.Helper()
	names, err := messages.NewNames("")
	require.NoError(t, err)
	_, err = srv.JS().CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: names.SchedulesBucket(), History: 1})
	require.NoError(t, err)
	j := &jobs{state: map[string]string{}}
	sc := New(Config{JetStream: srv.JS(), Names: names, Jobs: j, Clock: clk, Logger: zerolog.Nop(), MaxPerPool: maxPerPool})
	return &harness{sc: sc, jobs: j}
}

// run runs the scheduler's ticks, as a leader does, until the returned
// func stops it and waits for it.
func (h *harness) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.sc.Run(ctx) }()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// call sends req to the endpoint and decodes its reply into reply.
func (h *harness) call(t *testing.T, endpoint string, req, reply any) *messages.APIError {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	got, e := h.sc.Endpoints()[endpoint](context.Background(), data)
	if e != nil {
		return e
	}
	if reply != nil {
		data, err = json.Marshal(got)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, reply))
	}
	return nil
}

func (h *harness) schedule(t *testing.T, endpoint, name string) *messages.Schedule {
	t.Helper()
	var r messages.ScheduleReply
	require.Nil(t, h.call(t, endpoint, messages.ScheduleRequest{Name: name}, &r))
	return r.Schedule
}

// waitSchedule polls the schedule until ok accepts it.
func (h *harness) waitSchedule(t *testing.T, name string, ok func(*messages.Schedule) bool) *messages.Schedule {
	t.Helper()
	var s *messages.Schedule
	require.Eventually(t, func() bool {
		var r messages.ScheduleReply
		if h.call(t, messages.EndpointSchedulesGet, messages.ScheduleRequest{Name: name}, &r) != nil {
			return false
		}
		s = r.Schedule
		return ok(s)
	}, 20*time.Second, 20*time.Millisecond)
	return s
}

// The scheduler fires each tick of its clock once, with a job id from the
// tick; a tick whose previous run still runs is skipped with its reason;
// a trigger starts a run at once; pause stops the ticks and resume counts
// those it missed.
func TestScheduleFiresOnTheLeadersClock(t *testing.T) {
	srv := fleettest.RunServer(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	h := newHarness(t, srv, clk, 100)
	defer h.run(t)()

	var r messages.ScheduleReply
	require.Nil(t, h.call(t, messages.EndpointSchedulesAdd, everySpec("tick", time.Minute), &r))
	require.Equal(t, t0.Add(time.Minute), *r.Schedule.NextRun)
	e := h.call(t, messages.EndpointSchedulesAdd, everySpec("tick", time.Minute), nil)
	require.NotNil(t, e)
	require.Equal(t, messages.CodeConflict, e.Code)

	clk.Advance(time.Minute)
	s := h.waitSchedule(t, "tick", func(s *messages.Schedule) bool { return len(s.Runs) == 1 && s.Runs[0].Submitted })
	require.Equal(t, "tick-20260101t000100z", s.Runs[0].JobID)
	require.Equal(t, messages.StateRunning, s.Runs[0].State)
	require.True(t, h.jobs.has("tick-20260101t000100z"))

	// The next tick finds the run still going: overlap skip.
	clk.Advance(time.Minute)
	s = h.waitSchedule(t, "tick", func(s *messages.Schedule) bool { return s.Skipped[messages.SkipOverlap] == 1 })
	require.Len(t, s.Runs, 1)
	require.Contains(t, s.Skips[0].Detail, "tick-20260101t000100z")

	// Paused, three ticks pass; resumed, they are one skip of three.
	h.schedule(t, messages.EndpointSchedulesPause, "tick")
	clk.Advance(3 * time.Minute)
	s = h.schedule(t, messages.EndpointSchedulesResume, "tick")
	require.Equal(t, int64(3), s.Skipped[messages.SkipPaused])
	require.Equal(t, t0.Add(6*time.Minute), *s.NextRun)

	require.Nil(t, h.call(t, messages.EndpointSchedulesTrigger, messages.ScheduleRequest{Name: "tick"}, &r))
	require.Contains(t, r.JobID, "tick-manual-")
	require.True(t, h.jobs.has(r.JobID), "a trigger submits its run before it answers")

	var list messages.ScheduleListReply
	require.Nil(t, h.call(t, messages.EndpointSchedulesList, struct{}{}, &list))
	require.Len(t, list.Schedules, 1)
	require.Nil(t, h.call(t, messages.EndpointSchedulesRemove, messages.ScheduleRequest{Name: "tick"}, nil))
	e = h.call(t, messages.EndpointSchedulesGet, messages.ScheduleRequest{Name: "tick"}, nil)
	require.NotNil(t, e)
	require.Equal(t, messages.CodeNotFound, e.Code)
}

func TestScheduleAddNamesTheField(t *testing.T) {
	srv := fleettest.RunServer(t)
	h := newHarness(t, srv, clock.NewManual(time.Now()), 100)
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
			e := h.call(t, messages.EndpointSchedulesAdd, tt.spec, nil)
			require.NotNil(t, e)
			require.Equal(t, tt.field, e.Field, e.Message)
		})
	}
}

// Schedules are capped per pool: at MaxPerPool a pool's next schedule is
// refused with too_many and the field, another pool's is still accepted,
// and removing one makes room.
func TestSchedulesAreCappedPerPool(t *testing.T) {
	srv := fleettest.RunServer(t)
	h := newHarness(t, srv, clock.NewManual(time.Now()), 2)
	for _, name := range []string{"s1", "s2"} {
		require.Nil(t, h.call(t, messages.EndpointSchedulesAdd, everySpec(name, time.Hour), nil), name)
	}
	e := h.call(t, messages.EndpointSchedulesAdd, everySpec("s3", time.Hour), nil)
	require.NotNil(t, e)
	require.Equal(t, messages.CodeTooMany, e.Code)
	require.Equal(t, "job.pool", e.Field)
	require.Contains(t, e.Message, `pool "default" has 2 schedules; the limit is 2`)
	gpu := everySpec("g1", time.Hour)
	gpu.Job = json.RawMessage(`{"pool":"gpu","items":[{"id":"a"}],"agent_template":[{"handler":"h"}]}`)
	require.Nil(t, h.call(t, messages.EndpointSchedulesAdd, gpu, nil))
	require.Nil(t, h.call(t, messages.EndpointSchedulesRemove, messages.ScheduleRequest{Name: "s1"}, nil))
	require.Nil(t, h.call(t, messages.EndpointSchedulesAdd, everySpec("s3", time.Hour), nil))
}

// Ticks missed while no leader ran the scheduler: the next fires only the
// most recent, late, and counts the others as missed; a stopped scheduler
// leaves no goroutine behind.
func TestScheduleCatchUpAfterAnOutage(t *testing.T) {
	fleettest.VerifyNoLeaks(t)
	srv := fleettest.RunServer(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	h := newHarness(t, srv, clk, 100)
	stop := h.run(t)
	require.Nil(t, h.call(t, messages.EndpointSchedulesAdd, everySpec("hb", 2*time.Second), nil))
	stop()

	// A 10 s outage: ticks at +2 … +10 fall while no scheduler runs.
	clk.Advance(10*time.Second + 500*time.Millisecond)
	h = newHarness(t, srv, clk, 100)
	defer h.run(t)()
	s := h.waitSchedule(t, "hb", func(s *messages.Schedule) bool { return len(s.Runs) == 1 && s.Runs[0].Submitted })
	require.Equal(t, t0.Add(10*time.Second), s.Runs[0].Tick)
	require.Equal(t, "hb-20260101t000010z", s.Runs[0].JobID)
	require.Equal(t, int64(1), s.Fired)
	require.Equal(t, int64(4), s.Skipped[messages.SkipMissed])
	require.Len(t, s.Skips, 1)
	require.Equal(t, t0.Add(2*time.Second), s.Skips[0].First)
	require.Equal(t, t0.Add(8*time.Second), s.Skips[0].Last)
}

// A scheduler whose term ends before it follows the bucket returns no
// error: the end of a term is not a failure.
func TestRunEndsQuietlyWithItsTerm(t *testing.T) {
	srv := fleettest.RunServer(t)
	h := newHarness(t, srv, clock.NewManual(time.Now()), 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, h.sc.Run(ctx))
}
