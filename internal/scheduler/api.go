package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/internal/schedule"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Schedules (docs/schedules.md). A schedule's record lives in the
// schedules bucket, changed only by compare-and-set through
// internal/kvstate. Every coordinator serves the schedules.* endpoints;
// the leader alone fires ticks (runSchedules). Firing is two steps: the
// decision (the tick's run, or its skip) is written to the record first,
// then the run's job is submitted with an id derived from the schedule
// and the tick, and the run is marked submitted. A leader that dies
// between the two leaves a run not yet submitted, which the next leader
// submits; submitting an id twice is one job.

// pendingGrace is how long after its decision a submitted run whose job
// has no record yet (the intake has not taken it) counts as running.
const pendingGrace = time.Minute

// scheduleWait bounds the scheduler's sleep: a queued tick or a
// submission that failed is looked at again at least this often.
var scheduleWait = time.Second

// schedulesKV opens the schedules bucket.
func (c *Scheduler) schedulesKV(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, c.names.SchedulesBucket())
	if err != nil {
		return nil, fmt.Errorf("coordinator: schedules bucket %s: %w", c.names.SchedulesBucket(), err)
	}
	return kv, nil
}

// scheduleStore is a compare-and-set view of the schedules bucket.
func (c *Scheduler) scheduleStore(ctx context.Context) (*kvstate.Store[messages.Schedule], jetstream.KeyValue, error) {
	kv, err := c.schedulesKV(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := kvstate.New(kvstate.Config[messages.Schedule]{
		KV: kv, JetStream: c.js, Logger: c.log,
		WrittenBy: func(v messages.Schedule, id string) bool { return slices.Contains(v.Writers, id) },
	})
	return st, kv, err
}

// withWriter returns v carrying write id id among its last few.
func withWriter(v messages.Schedule, id string) messages.Schedule {
	v.Writers = append(slices.Clone(v.Writers[max(0, len(v.Writers)-7):]), id)
	return v
}

// timingOf returns a schedule's timing.
func timingOf(s *messages.Schedule) (*schedule.Timing, error) {
	if s.Cron != "" {
		return schedule.NewCron(s.Cron, s.TZ)
	}
	return schedule.NewEvery(time.Duration(s.Every), s.CreatedAt)
}

// checkSchedule returns every problem of a schedule spec, with its field.
func (c *Scheduler) checkSchedule(s *messages.ScheduleSpec) []messages.FieldError {
	var out []messages.FieldError
	add := func(field, format string, args ...any) {
		out = append(out, messages.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if err := messages.ValidScheduleName(s.Name); err != nil {
		add("name", "%v", err)
	}
	switch {
	case s.Cron == "" && s.Every == 0:
		add("cron", "set cron or every")
	case s.Cron != "" && s.Every != 0:
		add("every", "set cron or every, not both")
	case s.Cron != "":
		if _, err := schedule.NewCron(s.Cron, s.TZ); err != nil {
			var fe *schedule.FieldError
			if errors.As(err, &fe) {
				add(fe.Field, "%v", fe.Err)
			} else {
				add("cron", "%v", err)
			}
		}
	default:
		if s.TZ != "" {
			add("tz", "a time zone applies to cron, not to every")
		}
		if _, err := schedule.NewEvery(time.Duration(s.Every), time.Time{}); err != nil {
			add("every", "must be at least %v", schedule.MinEvery)
		}
	}
	switch s.Overlap {
	case "", messages.OverlapSkip, messages.OverlapQueue, messages.OverlapAllow:
	default:
		add("overlap", "%q is not skip, queue or allow", s.Overlap)
	}
	if s.Catchup != nil && *s.Catchup < 0 {
		add("catchup", "must not be negative")
	}
	if len(s.Job) == 0 {
		add("job", "required")
		return out
	}
	spec, problems := c.jobs.CheckSpec(s.Job)
	for _, p := range problems {
		p.Field = strings.TrimSuffix("job."+p.Field, ".")
		out = append(out, p)
	}
	if spec != nil {
		if spec.ID != "" {
			add("job.id", "must be empty: each run's id is the schedule's name and the tick's time")
		}
		if spec.Input != "" && !strings.Contains(spec.Input, "://") {
			add("job.input", "a schedule's input must be a stored object (objstore://…), not a local file")
		}
	}
	return out
}

// Endpoints are the schedules.* endpoints, by name.
func (c *Scheduler) Endpoints() map[string]endpoint.Func {
	return map[string]endpoint.Func{
		messages.EndpointSchedulesAdd:   c.apiScheduleAdd,
		messages.EndpointSchedulesList:  c.apiScheduleList,
		messages.EndpointSchedulesGet:   c.apiScheduleGet,
		messages.EndpointSchedulesPause: func(ctx context.Context, d []byte) (any, *messages.APIError) { return c.apiSchedulePause(ctx, d, true) },
		messages.EndpointSchedulesResume: func(ctx context.Context, d []byte) (any, *messages.APIError) {
			return c.apiSchedulePause(ctx, d, false)
		},
		messages.EndpointSchedulesTrigger: c.apiScheduleTrigger,
		messages.EndpointSchedulesRemove:  c.apiScheduleRemove,
	}
}

func (c *Scheduler) apiScheduleAdd(ctx context.Context, data []byte) (any, *messages.APIError) {
	var spec messages.ScheduleSpec
	if e := decodeRequest(data, &spec); e != nil {
		return nil, e
	}
	if problems := c.checkSchedule(&spec); len(problems) > 0 {
		return nil, endpoint.Problems(problems)
	}
	st, _, err := c.scheduleStore(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	defer st.Close()
	if e := c.scheduleRoom(ctx, st, &spec); e != nil {
		return nil, e
	}
	now := c.clock.Now().UTC()
	rec := messages.Schedule{ScheduleSpec: spec, CreatedAt: now, LastTick: now, Skipped: map[string]int64{}}
	e, created, err := st.Create(ctx, spec.Name, rec)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	if !created {
		return nil, &messages.APIError{Code: messages.CodeConflict, Field: "name",
			Message: fmt.Sprintf("schedule %q exists; remove it first", spec.Name)}
	}
	s := e.Value
	c.describeSchedule(ctx, &s)
	return messages.ScheduleReply{Schedule: &s}, nil
}

// schedulePool is the pool the jobs of schedule s run on.
func schedulePool(s *messages.ScheduleSpec) string {
	var job struct {
		Pool string `json:"pool"`
	}
	_ = json.Unmarshal(s.Job, &job)
	if job.Pool == "" {
		return messages.DefaultPool
	}
	return job.Pool
}

// scheduleRoom refuses a new schedule whose pool has MaxSchedulesPerPool
// schedules already. Two adds at once may both pass: the bound is checked,
// not reserved, and is exceeded by at most the adds in flight.
func (c *Scheduler) scheduleRoom(ctx context.Context, st *kvstate.Store[messages.Schedule], spec *messages.ScheduleSpec) *messages.APIError {
	kv, err := c.schedulesKV(ctx)
	if err != nil {
		return apiErr(messages.CodeInternal, err.Error())
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return apiErr(messages.CodeInternal, err.Error())
	}
	pool, n := schedulePool(spec), 0
	for name := range keys.Keys() {
		if name == spec.Name {
			continue // a conflict, reported as such by Create
		}
		got, err := st.Read(ctx, name)
		if err != nil || !got.Exists || schedulePool(&got.Value.ScheduleSpec) != pool {
			continue
		}
		n++
	}
	if n >= c.maxPerPool {
		return &messages.APIError{Code: messages.CodeTooMany, Field: "job.pool",
			Message: fmt.Sprintf("pool %q has %d schedules; the limit is %d (--max-schedules-per-pool): remove one first", pool, n, c.maxPerPool)}
	}
	return nil
}

// decodeScheduleRequest decodes a request that names one schedule.
func decodeScheduleRequest(data []byte) (messages.ScheduleRequest, *messages.APIError) {
	var req messages.ScheduleRequest
	if e := decodeRequest(data, &req); e != nil {
		return req, e
	}
	if req.Name == "" {
		return req, &messages.APIError{Code: messages.CodeBadRequest, Field: "name", Message: "name: required"}
	}
	if err := messages.ValidScheduleName(req.Name); err != nil {
		return req, &messages.APIError{Code: messages.CodeBadRequest, Field: "name", Message: "name: " + err.Error()}
	}
	return req, nil
}

func noSchedule(name string) *messages.APIError {
	return &messages.APIError{Code: messages.CodeNotFound, Field: "name", Message: fmt.Sprintf("no schedule %q", name)}
}

// errNoSchedule ends an Update of a schedule that does not exist.
var errNoSchedule = errors.New("coordinator: no such schedule")

func (c *Scheduler) apiScheduleGet(ctx context.Context, data []byte) (any, *messages.APIError) {
	req, e := decodeScheduleRequest(data)
	if e != nil {
		return nil, e
	}
	st, _, err := c.scheduleStore(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	defer st.Close()
	got, err := st.Read(ctx, req.Name)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	if !got.Exists {
		return nil, noSchedule(req.Name)
	}
	s := got.Value
	c.describeSchedule(ctx, &s)
	return messages.ScheduleReply{Schedule: &s}, nil
}

func (c *Scheduler) apiScheduleList(ctx context.Context, data []byte) (any, *messages.APIError) {
	if e := decodeRequest(data, &struct{}{}); e != nil {
		return nil, e
	}
	st, kv, err := c.scheduleStore(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	defer st.Close()
	names, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	out := messages.ScheduleListReply{Schedules: []messages.Schedule{}}
	for name := range names.Keys() {
		got, err := st.Read(ctx, name)
		if err != nil || !got.Exists {
			continue
		}
		s := got.Value
		c.describeSchedule(ctx, &s)
		out.Schedules = append(out.Schedules, s)
	}
	sort.Slice(out.Schedules, func(i, j int) bool { return out.Schedules[i].Name < out.Schedules[j].Name })
	return out, nil
}

// describeSchedule fills what a read shows beyond the record: the next
// run, the runs' job states.
func (c *Scheduler) describeSchedule(ctx context.Context, s *messages.Schedule) {
	s.Writers = nil
	if tm, err := timingOf(s); err == nil && !s.Paused {
		next := tm.Next(maxTime(s.LastTick, c.clock.Now()))
		s.NextRun = &next
	}
	for i := range s.Runs {
		r := &s.Runs[i]
		if !r.Submitted {
			r.State = "submitting"
			continue
		}
		if r.Error != "" {
			r.State = messages.StateRejected
			continue
		}
		if state, err := c.jobs.JobState(ctx, r.JobID); err == nil {
			r.State = state
		} else if errors.Is(err, ErrNoJob) {
			r.State = messages.StatePending
			if c.clock.Now().Sub(r.Decided) > pendingGrace {
				r.State = "gone"
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (c *Scheduler) apiSchedulePause(ctx context.Context, data []byte, pause bool) (any, *messages.APIError) {
	req, e := decodeScheduleRequest(data)
	if e != nil {
		return nil, e
	}
	st, _, err := c.scheduleStore(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	defer st.Close()
	now := c.clock.Now().UTC()
	ch, err := st.Update(ctx, req.Name, func(cur kvstate.Entry[messages.Schedule], id string) (messages.Schedule, bool, error) {
		if !cur.Exists {
			return cur.Value, false, errNoSchedule
		}
		s := cur.Value
		if s.Paused == pause {
			return s, false, nil
		}
		s.Paused = pause
		if pause {
			s.PausedAt = now
		} else {
			// Ticks while paused are not fired: they are counted as one skip.
			s = skipPaused(s, now)
			s.PausedAt = time.Time{}
		}
		return withWriter(s, id), true, nil
	})
	if errors.Is(err, errNoSchedule) {
		return nil, noSchedule(req.Name)
	}
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	s := ch.To.Value
	c.describeSchedule(ctx, &s)
	return messages.ScheduleReply{Schedule: &s}, nil
}

// skipPaused records the ticks of s that fell while it was paused, up to
// now, as skipped, and moves LastTick past them.
func skipPaused(s messages.Schedule, now time.Time) messages.Schedule {
	tm, err := timingOf(&s)
	if err != nil {
		return s
	}
	var first, last time.Time
	var n int64
	for tick := tm.Next(s.LastTick); !tick.After(now) && n < 1_000_000; tick = tm.Next(tick) {
		if first.IsZero() {
			first = tick
		}
		last, n = tick, n+1
	}
	if n == 0 {
		return s
	}
	s.Skips = append(slices.Clone(s.Skips), messages.ScheduleSkip{First: first, Last: last, Count: n,
		Reason: messages.SkipPaused, Detail: "the schedule was paused", At: now})
	if len(s.Skips) > schedule.KeepSkips {
		s.Skips = s.Skips[len(s.Skips)-schedule.KeepSkips:]
	}
	s.Skipped = cloneCounts(s.Skipped)
	s.Skipped[messages.SkipPaused] += n
	s.LastTick = last
	return s
}

// cloneCounts copies m, with room for one more key.
func cloneCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (c *Scheduler) apiScheduleRemove(ctx context.Context, data []byte) (any, *messages.APIError) {
	req, e := decodeScheduleRequest(data)
	if e != nil {
		return nil, e
	}
	kv, err := c.schedulesKV(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	if _, err := kv.Get(ctx, req.Name); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, noSchedule(req.Name)
	}
	// A delete marker, not a purge: the bucket refuses rollups, which a
	// purge is (docs/security.md); History 1 keeps only the marker.
	if err := kv.Delete(ctx, req.Name); err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	return messages.ScheduleReply{}, nil
}

// apiScheduleTrigger starts a run of a schedule now, outside its timing
// (its job id carries "manual" and a unique suffix), whatever its overlap
// policy and even when paused.
func (c *Scheduler) apiScheduleTrigger(ctx context.Context, data []byte) (any, *messages.APIError) {
	req, e := decodeScheduleRequest(data)
	if e != nil {
		return nil, e
	}
	st, _, err := c.scheduleStore(ctx)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	defer st.Close()
	now := c.clock.Now().UTC()
	run := messages.ScheduleRun{Tick: now, JobID: req.Name + "-manual-" + strings.ToLower(nuid.Next()), Decided: now, Manual: true}
	_, err = st.Update(ctx, req.Name, func(cur kvstate.Entry[messages.Schedule], id string) (messages.Schedule, bool, error) {
		if !cur.Exists {
			return cur.Value, false, errNoSchedule
		}
		s := cur.Value
		s.Runs = append(slices.Clone(s.Runs), run)
		if len(s.Runs) > schedule.KeepRuns {
			s.Runs = s.Runs[len(s.Runs)-schedule.KeepRuns:]
		}
		return withWriter(s, id), true, nil
	})
	if errors.Is(err, errNoSchedule) {
		return nil, noSchedule(req.Name)
	}
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	s, err := c.submitRuns(ctx, st, req.Name)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	c.describeSchedule(ctx, &s)
	return messages.ScheduleReply{Schedule: &s, JobID: run.JobID}, nil
}

// submitRuns submits the jobs of the schedule's runs not yet submitted
// and marks them so; it returns the record as it left it.
func (c *Scheduler) submitRuns(ctx context.Context, st *kvstate.Store[messages.Schedule], name string) (messages.Schedule, error) {
	cur, err := st.Read(ctx, name)
	if err != nil || !cur.Exists {
		return cur.Value, err
	}
	done := map[string]string{} // job id → error ("" = submitted)
	for _, r := range cur.Value.Runs {
		if r.Submitted {
			continue
		}
		var spec messages.JobSpec
		if err := json.Unmarshal(cur.Value.Job, &spec); err != nil {
			done[r.JobID] = "the schedule's job does not decode: " + err.Error()
			continue
		}
		spec.ID = r.JobID
		body, _ := json.Marshal(spec)
		if e := c.jobs.Submit(ctx, body); e != nil {
			if e.Code == messages.CodeInternal {
				return cur.Value, e // tried again later
			}
			done[r.JobID] = e.Message
			continue
		}
		c.log.Info().Str("schedule", name).Str("job_id", r.JobID).Time("tick", r.Tick).Msg("schedule fired")
		done[r.JobID] = ""
	}
	if len(done) == 0 {
		return cur.Value, nil
	}
	ch, err := st.Update(ctx, name, func(cur kvstate.Entry[messages.Schedule], id string) (messages.Schedule, bool, error) {
		s := cur.Value
		if !cur.Exists {
			return s, false, nil
		}
		s.Runs = slices.Clone(s.Runs)
		write := false
		for i := range s.Runs {
			if msg, ok := done[s.Runs[i].JobID]; ok && !s.Runs[i].Submitted {
				s.Runs[i].Submitted, s.Runs[i].Error, write = true, msg, true
			}
		}
		return withWriter(s, id), write, nil
	})
	return ch.To.Value, err
}
