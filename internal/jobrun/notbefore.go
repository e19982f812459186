package jobrun

import (
	"context"
	"time"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Run-at (docs/jobs.md, "Held until not_before"). At acceptance a job's
// not_before is resolved to a time, stored in the record's spec, and a
// job due later is accepted as scheduled. Its runner follows it like any
// other (cancel works), but publishes nothing until the time; then the
// job is running. The record holds the time, so a job held across a
// coordinator restart or failover is held by the next leader until the
// same time.

// holdAtAcceptance resolves rec's not_before against now, and marks the
// job scheduled when the time is still to come.
func holdAtAcceptance(rec *wire.JobRecord, now time.Time) {
	if rec.Spec == nil || rec.Spec.NotBefore == "" {
		return
	}
	at, err := wire.NotBeforeTime(rec.Spec.NotBefore, now)
	if err != nil {
		return // refused at submission (pkg/jobspec)
	}
	rec.Spec.NotBefore = at.UTC().Format(time.RFC3339Nano)
	if at.After(now) {
		rec.Status.State = messages.StateScheduled
	}
}

// dueAt is when an accepted job's items may first run: its not_before
// time (resolved by holdAtAcceptance), or now.
func dueAt(rec *wire.JobRecord, now time.Time) time.Time {
	if rec.Spec == nil || rec.Spec.NotBefore == "" {
		return now
	}
	at, err := time.Parse(time.RFC3339Nano, rec.Spec.NotBefore)
	if err != nil || at.Before(now) {
		return now
	}
	return at
}

// holdNotBefore waits, while the job is scheduled, until its not_before
// time on the coordinator's clock, then marks it running. It returns
// ctx's error when ctx ends first (the job cancelled, the term over).
func (r *jobRunner) holdNotBefore(ctx context.Context) error {
	r.mu.Lock()
	scheduled := r.rec.Status.State == messages.StateScheduled && r.rec.Spec != nil
	var notBefore string
	if scheduled {
		notBefore = r.rec.Spec.NotBefore
	}
	r.mu.Unlock()
	if !scheduled {
		return nil
	}
	at, err := wire.NotBeforeTime(notBefore, r.c.cfg.hooks.Clock.Now())
	if err != nil {
		at = time.Time{} // not a time: run now
	}
	for {
		left := at.Sub(r.c.cfg.hooks.Clock.Now())
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(left, time.Second)) // the clock may be moved
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	r.mu.Lock()
	st := &r.rec.Status
	if st.State != messages.StateScheduled {
		r.mu.Unlock()
		return nil
	}
	now := r.c.cfg.hooks.Clock.Now()
	st.State, st.StartedAt = messages.StateRunning, &now
	r.dirty = true
	items := st.Items
	r.mu.Unlock()
	r.log.Info().Time("not_before", at).Msg("job due: publishing its items")
	r.c.event(r.id, messages.JobStartedEvent{Items: items})
	return nil
}
