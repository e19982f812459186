package schedule

import (
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Bounds of a schedule record's history.
const (
	// KeepRuns is how many runs a record keeps; KeepSkips how many skip
	// entries (each may stand for many ticks).
	KeepRuns  = 20
	KeepSkips = 20
	// LateAfter is how long after its tick a run is marked late; a tick
	// this late still fires whatever the catch-up window.
	LateAfter = 5 * time.Second
	// maxScan bounds the ticks enumerated in one Plan (a second-schedule
	// left alone for 11 days); older ones are counted as one skip.
	maxScan = 1_000_000
)

// Plan decides what the ticks of s due at now become: the schedule's
// next record and the runs to start (their jobs not yet submitted).
// prevActive says whether the schedule's last run has not ended.
// changed is false when nothing is due; Plan never reads the clock.
//
// The rules (docs/schedules.md): of the ticks due since LastTick only the
// most recent may fire, the others are skipped as missed; it fires if it
// is at most the catch-up window old, else it is missed too; while the
// previous run is active, overlap skip skips it, queue holds it (one at
// most) until that run ends, allow fires it.
func Plan(s messages.Schedule, t *Timing, now time.Time, prevActive bool) (next messages.Schedule, fire []messages.ScheduleRun, changed bool) {
	if s.Paused {
		return s, nil, false
	}
	s.Runs = append([]messages.ScheduleRun(nil), s.Runs...)
	s.Skips = append([]messages.ScheduleSkip(nil), s.Skips...)
	s.Skipped = cloneCounts(s.Skipped)
	start := func(tick time.Time) {
		r := messages.ScheduleRun{
			Tick: tick, JobID: messages.ScheduleJobID(s.Name, tick),
			Decided: now, Late: now.Sub(tick) > LateAfter,
		}
		s.Runs = append(s.Runs, r)
		if len(s.Runs) > KeepRuns {
			s.Runs = s.Runs[len(s.Runs)-KeepRuns:]
		}
		s.Fired++
		fire = append(fire, r)
		prevActive = true
	}
	if s.Queued != nil && !prevActive {
		tick := *s.Queued
		s.Queued = nil
		start(tick)
		changed = true
	}

	skip := func(k messages.ScheduleSkip) {
		s.Skips = append(s.Skips, k)
		if len(s.Skips) > KeepSkips {
			s.Skips = s.Skips[len(s.Skips)-KeepSkips:]
		}
		s.Skipped[k.Reason] += k.Count
	}

	var first, prev, latest time.Time
	var older int64
	for tick, n := t.Next(s.LastTick), 0; !tick.After(now); tick, n = t.Next(tick), n+1 {
		if n == maxScan { // count the rest roughly: jump near now
			older += int64(n)
			if first.IsZero() {
				first = tick
			}
			tick = t.Next(now.Add(-2 * Catchup(&s.ScheduleSpec)))
			n = 0
			if tick.After(now) {
				break
			}
		}
		if !latest.IsZero() {
			if first.IsZero() {
				first = latest
			}
			prev = latest
			older++
		}
		latest = tick
	}
	if latest.IsZero() {
		return s, fire, changed
	}
	if older > 0 {
		skip(messages.ScheduleSkip{First: first, Last: prev, Count: older, Reason: messages.SkipMissed,
			Detail: "a later tick was due when a leader could fire them", At: now})
	}
	s.LastTick = latest
	switch late := now.Sub(latest); {
	case late > max(Catchup(&s.ScheduleSpec), LateAfter):
		skip(messages.ScheduleSkip{First: latest, Last: latest, Count: 1, Reason: messages.SkipMissed,
			Detail: fmt.Sprintf("%v late, beyond the catch-up window of %v", late.Round(time.Second), Catchup(&s.ScheduleSpec)), At: now})
	case !prevActive || Overlap(&s.ScheduleSpec) == messages.OverlapAllow:
		start(latest)
	case Overlap(&s.ScheduleSpec) == messages.OverlapQueue:
		if s.Queued != nil {
			skip(messages.ScheduleSkip{First: *s.Queued, Last: *s.Queued, Count: 1, Reason: messages.SkipQueued,
				Detail: "a newer tick took its place while the previous run was still running", At: now})
		}
		q := latest
		s.Queued = &q
	default:
		detail := "the previous run was still running"
		if n := len(s.Runs); n > 0 {
			detail = fmt.Sprintf("the previous run %s was still running", s.Runs[n-1].JobID)
		}
		skip(messages.ScheduleSkip{First: latest, Last: latest, Count: 1, Reason: messages.SkipOverlap, Detail: detail, At: now})
	}
	return s, fire, true
}

func cloneCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
