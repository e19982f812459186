package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/schedule"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// errRunChanged ends a tick's Update whose record names another last run
// than the one whose state was looked up; the scheduler looks again.
var errRunChanged = errors.New("coordinator: the schedule's last run changed")

// Run fires the schedules' ticks while this coordinator leads:
// it follows the schedules bucket, sleeps until the next tick due (at
// most scheduleWait), and applies schedule.Plan to every schedule with a
// tick due, a queued tick, or a run not yet submitted. It returns nil
// once ctx ends, and an error only when it cannot follow the bucket.
func (c *Scheduler) Run(ctx context.Context) error {
	st, kv, err := c.scheduleStore(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	defer st.Close()
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	var mu sync.Mutex
	known := map[string]messages.Schedule{}
	wake := make(chan struct{}, 1)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = kvwatch.Watch(ctx, w, func() { close(ready) }, func(e jetstream.KeyValueEntry) {
			mu.Lock()
			defer mu.Unlock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(known, e.Key())
				return
			}
			var s messages.Schedule
			if json.Unmarshal(e.Value(), &s) == nil {
				known[e.Key()] = s
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}()
	defer wg.Wait()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil
	}
	for {
		now := c.clock.Now()
		wait := scheduleWait
		mu.Lock()
		var due []string
		for name, s := range known {
			tm, err := timingOf(&s)
			if err != nil || s.Paused {
				continue
			}
			if next := tm.Next(s.LastTick); !next.After(now) || s.Queued != nil || unsubmitted(&s) {
				due = append(due, name)
			} else {
				wait = min(wait, next.Sub(now))
			}
		}
		mu.Unlock()
		for _, name := range due {
			if err := c.fireSchedule(ctx, st, name); err != nil && ctx.Err() == nil {
				c.log.Warn().Err(err).Str("schedule", name).Msg("firing a schedule failed; trying again")
			}
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// stopped is err, or nil when ctx has ended (the term is over: no error).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func unsubmitted(s *messages.Schedule) bool {
	for _, r := range s.Runs {
		if !r.Submitted {
			return true
		}
	}
	return false
}

// fireSchedule decides the schedule's due ticks (schedule.Plan, by
// compare-and-set) and submits the runs decided, with any left
// unsubmitted by an earlier leader.
func (c *Scheduler) fireSchedule(ctx context.Context, st *kvstate.Store[messages.Schedule], name string) error {
	for range 3 {
		cur, err := st.Read(ctx, name)
		if err != nil || !cur.Exists {
			return err
		}
		last, active, err := c.lastRunActive(ctx, &cur.Value)
		if err != nil {
			return err // decided at the next look, not on a guess
		}
		now := c.clock.Now().UTC()
		_, err = st.Update(ctx, name, func(cur kvstate.Entry[messages.Schedule], id string) (messages.Schedule, bool, error) {
			s := cur.Value
			if !cur.Exists {
				return s, false, nil
			}
			if lastRunID(&s) != last {
				return s, false, errRunChanged
			}
			tm, err := timingOf(&s)
			if err != nil {
				return s, false, err
			}
			next, _, changed := schedule.Plan(s, tm, now, active)
			if !changed {
				return s, false, nil
			}
			return withWriter(next, id), true, nil
		})
		if errors.Is(err, errRunChanged) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = c.submitRuns(ctx, st, name)
		return err
	}
	return nil
}

func lastRunID(s *messages.Schedule) string {
	if len(s.Runs) == 0 {
		return ""
	}
	return s.Runs[len(s.Runs)-1].JobID
}

// lastRunActive returns the schedule's last run's job id and whether that
// run has not ended: not yet submitted, its job not in a terminal state,
// or submitted so recently that the intake may not have taken it.
func (c *Scheduler) lastRunActive(ctx context.Context, s *messages.Schedule) (string, bool, error) {
	if len(s.Runs) == 0 {
		return "", false, nil
	}
	r := s.Runs[len(s.Runs)-1]
	if !r.Submitted {
		return r.JobID, true, nil
	}
	if r.Error != "" {
		return r.JobID, false, nil
	}
	state, err := c.jobs.JobState(ctx, r.JobID)
	if errors.Is(err, ErrNoJob) {
		return r.JobID, c.clock.Now().Sub(r.Decided) < pendingGrace, nil
	}
	if err != nil {
		return r.JobID, false, err
	}
	return r.JobID, !messages.TerminalState(state), nil
}
