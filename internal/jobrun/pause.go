package jobrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Pause and resume (docs/jobs.md "Pause and resume"; the pause bucket's
// keys are in internal/wire/pausekeys.go).
//
// Any coordinator answers jobs.pause and pools.pause by writing the key;
// the leader's view of the bucket (pause.View, kept by every coordinator)
// then moves the runner: a paused job's publisher stops and its state is
// paused. Agents watch the bucket too and hold what they get of a paused
// job, or of any job while their pool is paused, in their pool's park
// stream, acking the delivery: no item of a paused job runs or waits on
// the consumer. On resume the runner publishes again from its cursor and
// the leader moves the held copies back onto the work stream (release),
// each under a message id of its own so that a second move after a
// failover is a duplicate. Everything is in the bucket, the job record
// and the park streams: a new leader carries on where the last stopped.

// pauseWait bounds how long jobs.pause and jobs.resume wait for the
// job's record to say the job is paused, or no longer is.
var pauseWait = 5 * time.Second

// releaseIdle is how often the leader looks for held copies to move back
// when nothing was resumed lately; after a resume it looks at once and
// then every releaseSoon for releaseFollowUps rounds, for the copies that
// agents whose view of the bucket lagged held after the resume.
const (
	releaseIdle      = 5 * time.Second
	releaseSoon      = 500 * time.Millisecond
	releaseFollowUps = 6
)

// releaseBatch is how many held copies are moved back per publish batch.
const releaseBatch = 256

// errMapEnded: the job's map phase is over, nothing is left to pause.
var errMapEnded = errors.New("coordinator: the job's map phase ended")

// pauseChanged is the pause view's callback: it wakes the runners the
// change concerns, and after a resume the releaser.
func (c *Coordinator) pauseChanged(kind, name string, paused bool) {
	if kind == messages.PausedByJob {
		if r := c.runner(name); r != nil {
			r.wakeUp()
		}
	} else {
		c.mu.Lock()
		rs := make([]*jobRunner, 0, len(c.runners))
		for _, r := range c.runners {
			rs = append(rs, r)
		}
		c.mu.Unlock()
		for _, r := range rs {
			r.wakeUp()
		}
	}
	if !paused {
		select {
		case c.releaseNow <- struct{}{}:
		default:
		}
	}
}

// JobPause pauses job id: no new step of it starts once the agents see
// the pause (within a second), the steps running finish. It waits (up to
// pauseWait) for the job's record to say paused.
func (c *Coordinator) JobPause(ctx context.Context, id string) (*messages.JobStatus, error) {
	rec, err := c.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if messages.TerminalState(rec.Status.State) {
		return &rec.Status, errJobFinished
	}
	if rec.Status.MapReason != "" {
		return &rec.Status, errMapEnded
	}
	if err := c.putPause(ctx, wire.PauseJobKey(id)); err != nil {
		return nil, err
	}
	return c.waitPaused(ctx, id, func(st *messages.JobStatus) bool {
		return st.State == messages.StatePaused && st.PausedBy == messages.PausedByJob
	})
}

// JobResume resumes job id. The job stays paused while its pool is.
func (c *Coordinator) JobResume(ctx context.Context, id string) (*messages.JobStatus, error) {
	rec, err := c.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.pauseKV.Delete(ctx, wire.PauseJobKey(id)); err != nil {
		return nil, fmt.Errorf("deleting the pause: %w", err)
	}
	if messages.TerminalState(rec.Status.State) {
		return &rec.Status, nil
	}
	return c.waitPaused(ctx, id, func(st *messages.JobStatus) bool {
		return st.State != messages.StatePaused || st.PausedBy != messages.PausedByJob
	})
}

// PoolPause pauses every job of pool, and what any job routes to it.
func (c *Coordinator) PoolPause(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	if err := c.putPause(ctx, wire.PausePoolKey(pool)); err != nil {
		return nil, err
	}
	return c.poolPause(ctx, pool)
}

// PoolResume resumes pool.
func (c *Coordinator) PoolResume(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	if err := c.pauseKV.Delete(ctx, wire.PausePoolKey(pool)); err != nil {
		return nil, fmt.Errorf("deleting the pause: %w", err)
	}
	return c.poolPause(ctx, pool)
}

// poolPause reads pool's pause from the bucket.
func (c *Coordinator) poolPause(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	reply := &messages.PoolPauseReply{Pool: pool}
	e, err := c.pauseKV.Get(ctx, wire.PausePoolKey(pool))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return reply, nil
	case err != nil:
		return nil, err
	}
	var rec wire.PauseRecord
	if json.Unmarshal(e.Value(), &rec) == nil && !rec.At.IsZero() {
		reply.Since = &rec.At
	}
	reply.Paused = true
	return reply, nil
}

// putPause creates a pause key; one that exists keeps its time.
func (c *Coordinator) putPause(ctx context.Context, key string) error {
	data, _ := json.Marshal(wire.PauseRecord{At: c.cfg.hooks.Clock.Now().UTC(), By: c.cfg.Holder})
	_, err := c.pauseKV.Create(ctx, key, data)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("storing the pause: %w", err)
	}
	return nil
}

// waitPaused polls the job's stored record until done says so, the job
// ends, or pauseWait passes; it returns the job's status then. It reads the
// record, not the leader's live status: the runner moves its live status
// first and writes the record just after, and jobs.list (and a follower's
// status) answer from the record: a pause that returned must show in the
// list filtered by state.
func (c *Coordinator) waitPaused(ctx context.Context, id string, done func(*messages.JobStatus) bool) (*messages.JobStatus, error) {
	wctx, cancel := context.WithTimeout(ctx, pauseWait)
	defer cancel()
	for {
		rec, err := c.store.getFromLeader(wctx, id)
		if err == nil && (done(&rec.Status) || messages.TerminalState(rec.Status.State)) {
			if st, err := c.Status(wctx, id); err == nil {
				return st, nil // as new as the record, with the live counts
			}
			return &rec.Status, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				return nil, err
			}
			return c.Status(ctx, id) // the leader moves it when it can
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pausedBy says what pauses the runner's job now ("" nothing): the job's
// key, or its pool's (the spec's pool).
func (r *jobRunner) pausedBy() string {
	pool := messages.DefaultPool
	r.mu.Lock()
	if r.rec.Spec != nil {
		pool = cmp.Or(r.rec.Spec.Pool, messages.DefaultPool)
	}
	r.mu.Unlock()
	return r.c.pauses.By(r.id, pool)
}

// followPause moves the job to paused or back as the pause view says,
// stopping or starting the publisher; it returns the publisher now. Only
// the run loop calls it.
func (r *jobRunner) followPause(ctx context.Context, pub *publishing) *publishing {
	select {
	case <-r.c.pauses.Ready():
	default:
		return pub // the publisher waits for the view as well
	}
	by := r.pausedBy()
	r.mu.Lock()
	st := &r.rec.Status
	ended := r.life.ended() || messages.TerminalState(st.State)
	switch {
	case ended:
		if st.PausedBy != "" {
			st.PausedBy = ""
			r.dirty = true
		}
		r.mu.Unlock()
		if _, paused := r.c.pauses.Job(r.id); paused {
			// A job that ended paused (cancelled) is paused no more: a new
			// job of the same id, after retention, starts unpaused.
			r.c.dropPause(ctx, r.id)
		}
		return pub
	case by != "" && (st.State != messages.StatePaused || st.PausedBy != by):
		was := st.State
		st.State, st.PausedBy = messages.StatePaused, by
		r.dirty = true
		r.mu.Unlock()
		if was != messages.StatePaused {
			pub.stop()
			r.log.Info().Str("paused_by", by).Msg("job paused: publishing stopped")
		}
		r.flush(ctx)
		return pub
	case by == "" && st.State == messages.StatePaused:
		st.PausedBy = ""
		if st.StartedAt != nil {
			st.State = messages.StateRunning
		} else {
			st.State = messages.StateScheduled // holdNotBefore starts it when due
		}
		r.dirty = true
		r.mu.Unlock()
		r.log.Info().Msg("job resumed: publishing again")
		r.flush(ctx)
		return r.startPublishing(ctx)
	}
	r.mu.Unlock()
	return pub
}

// runReleases moves held copies back onto the work stream while this
// coordinator leads: after every resume, and every releaseIdle.
func (c *Coordinator) runReleases(ctx context.Context) error {
	select {
	case <-c.pauses.Ready():
	case <-ctx.Done():
		return nil
	}
	followUps := 1 // a new term looks soon: a failover may have cut a release short
	for {
		delay := releaseIdle
		if followUps > 0 {
			delay = releaseSoon
			followUps--
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.releaseNow:
			followUps = releaseFollowUps
		case <-t.C:
		}
		t.Stop()
		c.releaseHeld(ctx)
	}
}

// releaseHeld moves back every held copy whose job and pool are not
// paused, pool by pool.
func (c *Coordinator) releaseHeld(ctx context.Context) {
	pools, err := c.pools.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn().Err(err).Msg("cannot list the pools to release held items; trying again")
		}
		return
	}
	for _, pool := range pools {
		if _, paused := c.pauses.Pool(pool); paused {
			continue
		}
		n, err := c.releasePool(ctx, pool)
		if n > 0 {
			c.log.Info().Str("pool", pool).Int("items", n).Msg("held items moved back to the work stream")
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn().Err(err).Str("pool", pool).Msg("releasing held items failed; trying again")
		}
	}
}

// releasePool moves back pool's held copies of jobs not paused: each is
// published to the work stream (PubAck awaited), then deleted from the
// park stream. It returns how many it moved.
func (c *Coordinator) releasePool(ctx context.Context, pool string) (int, error) {
	s, err := c.stream(ctx, c.names.ParkStream(pool))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	filter := wire.HeldFilter(c.names, pool, "*")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	// The subjects say which jobs have held copies here: only those of
	// jobs not paused are read, so a long pause costs one count per round.
	jobs := map[string]bool{}
	for subj := range info.State.Subjects {
		if job, ok := wire.ParseHeld(c.names, pool, subj); ok {
			jobs[job] = true
		}
	}
	moved := 0
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		if _, paused := c.pauses.Job(job); paused {
			continue
		}
		n, err := c.releaseJob(ctx, s, pool, job)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// releaseJob moves back job's held copies in pool's park stream s.
func (c *Coordinator) releaseJob(ctx context.Context, s jetstream.Stream, pool, job string) (int, error) {
	filter := wire.HeldFilter(c.names, pool, job)
	moved := 0
	var (
		msgs []*nats.Msg
		seqs []uint64
	)
	flush := func() error {
		if len(msgs) == 0 {
			return nil
		}
		refused, lastErr, err := c.work.Send(ctx, msgs)
		if err != nil {
			return err
		}
		gone := map[*nats.Msg]bool{}
		for _, m := range refused {
			gone[m] = true
		}
		for i, m := range msgs {
			if gone[m] {
				continue // still held: the next round moves it
			}
			if err := s.DeleteMsg(ctx, seqs[i]); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return err
			}
			moved++
		}
		msgs, seqs = msgs[:0], seqs[:0]
		if len(refused) > 0 {
			return fmt.Errorf("the work stream refused %d held items: %w", len(refused), lastErr)
		}
		return nil
	}
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return moved, err
		}
		seq = m.Sequence + 1
		out := &nats.Msg{
			Subject: c.names.WorkSubject(pool, job),
			Data:    m.Data,
			Header:  nats.Header{messages.HeaderMsgID: []string{wire.ReleasedMsgID(job, pool, m.Sequence)}},
		}
		if tp := m.Header.Get(tracing.HeaderTraceparent); tp != "" {
			out.Header[tracing.HeaderTraceparent] = []string{tp}
		}
		msgs, seqs = append(msgs, out), append(seqs, m.Sequence)
		if len(msgs) == releaseBatch {
			if err := flush(); err != nil {
				return moved, err
			}
		}
	}
	return moved, flush()
}

// dropPause deletes job id's pause key, if any (a delete marker, which
// the watches see).
func (c *Coordinator) dropPause(ctx context.Context, id string) {
	if c.pauseKV == nil {
		return // not running
	}
	key := wire.PauseJobKey(id)
	e, err := c.pauseKV.Get(ctx, key)
	if err != nil {
		return // none (or unreadable: retention tries again)
	}
	var rec wire.PauseRecord
	_ = json.Unmarshal(e.Value(), &rec)
	if err := rec.V.Check("the pause mark " + key); err != nil {
		// A coordinator of the newer release deletes it (docs/contract.md §8).
		c.log.Warn().Err(err).Str("job_id", id).Msg("pause mark of an ended job left for a coordinator of a newer release")
		return
	}
	// Only the mark read: one written since is another's to judge.
	if err := c.pauseKV.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && ctx.Err() == nil {
		c.log.Warn().Err(err).Str("job_id", id).Msg("cannot delete the pause of an ended job")
	}
}
