package jobrun

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var (
	allPhases   = []phase{phaseReplaying, phaseMapping, phaseReducing, phaseLingering, phaseExited}
	allTriggers = []trigger{caughtUp, caughtUpReducing, mapEndReduce, mapEndFinish, reduceDone, reopened, lingerDone, shutdown}
)

// Every (phase, trigger) pair: the legal ones move to the phase of
// docs/jobs.md's diagram, every other one is refused and changes nothing.
func TestLifecycleTransitions(t *testing.T) {
	t.Parallel()
	legal := map[[2]string]phase{
		{"replaying", "caught_up"}:          phaseMapping,
		{"replaying", "caught_up_reducing"}: phaseReducing,
		{"replaying", "map_end_reduce"}:     phaseReducing,
		{"replaying", "map_end_finish"}:     phaseLingering,
		{"replaying", "reduce_done"}:        phaseLingering,
		{"replaying", "shutdown"}:           phaseExited,
		{"mapping", "map_end_reduce"}:       phaseReducing,
		{"mapping", "map_end_finish"}:       phaseLingering,
		{"mapping", "shutdown"}:             phaseExited,
		{"reducing", "reduce_done"}:         phaseLingering,
		{"reducing", "reopened"}:            phaseMapping,
		{"reducing", "shutdown"}:            phaseExited,
		{"lingering", "reopened"}:           phaseMapping,
		{"lingering", "linger_done"}:        phaseExited,
		{"lingering", "shutdown"}:           phaseExited,
	}
	seen := 0
	for _, from := range allPhases {
		for _, tr := range allTriggers {
			t.Run(fmt.Sprintf("%s/%s", from, tr), func(t *testing.T) {
				l := lifecycle{phase: from, round: 3}
				before := l
				err := l.fire(tr)
				want, ok := legal[[2]string{from.String(), tr.String()}]
				if !ok {
					require.ErrorIs(t, err, errTransition)
					require.Equal(t, before, l, "a refused transition changes nothing")
					return
				}
				seen++
				require.NoError(t, err)
				require.Equal(t, want, l.phase)
			})
		}
	}
	require.Equal(t, len(legal), seen, "every legal transition was tried")
}

// What a transition records besides the phase: live, the map's end and
// the round.
func TestLifecycleFacts(t *testing.T) {
	t.Parallel()
	var l lifecycle
	require.False(t, l.deciding(), "nothing is decided while replaying")
	l.catchUp(false)
	require.Equal(t, phaseMapping, l.phase)
	require.True(t, l.live)
	require.True(t, l.deciding())
	require.False(t, l.ended())

	require.NoError(t, l.fire(mapEndReduce))
	require.True(t, l.mapEnded)
	require.True(t, l.ended())
	require.False(t, l.deciding())
	require.NoError(t, l.fire(reopened))
	require.Equal(t, 1, l.round)
	require.False(t, l.mapEnded, "a reopen starts a round whose map has not ended")
	require.True(t, l.deciding(), "a reopened job decides again")
	require.NoError(t, l.fire(mapEndFinish))
	require.Equal(t, phaseLingering, l.phase)

	t.Run("restart while reducing", func(t *testing.T) {
		var l lifecycle
		l.catchUp(true)
		require.Equal(t, phaseReducing, l.phase)
		require.True(t, l.live)
		require.True(t, l.mapEnded, "the loop owes the map end's work (purge, reduce)")
	})
	t.Run("a cancel while replaying, then the replay catches up", func(t *testing.T) {
		var l lifecycle
		require.NoError(t, l.fire(mapEndFinish))
		require.False(t, l.live, "results still being replayed are not announced")
		l.catchUp(false)
		require.Equal(t, phaseLingering, l.phase, "catching up does not reopen it")
		require.True(t, l.live)
	})
	t.Run("record phases", func(t *testing.T) {
		require.Equal(t, "", recordPhase(phaseReplaying))
		require.Equal(t, messages.PhaseMap, recordPhase(phaseMapping))
		require.Equal(t, messages.PhaseReducing, recordPhase(phaseReducing))
		require.Equal(t, messages.PhaseDone, recordPhase(phaseLingering))
		require.Equal(t, "", recordPhase(phaseExited))
	})
}

// The late-result window: a hold buys one more window, a reopen cancels
// the wait, and a runner that exited cannot be held.
func TestLateWindow(t *testing.T) {
	t.Parallel()
	fired := make(chan time.Time)
	var started []time.Duration
	newWait := func() *lateWait {
		return &lateWait{window: time.Minute, after: func(d time.Duration) <-chan time.Time {
			started = append(started, d)
			return fired
		}}
	}
	lingering := func() *lifecycle {
		l := &lifecycle{}
		l.catchUp(false)
		require.NoError(t, l.fire(mapEndFinish))
		return l
	}

	t.Run("unheld: the runner exits", func(t *testing.T) {
		l, w := lingering(), newWait()
		w.start()
		require.True(t, w.waiting())
		require.True(t, w.decide(l.windowPassed()))
		require.Equal(t, phaseExited, l.phase)
		require.False(t, w.waiting())
		require.False(t, l.hold(), "too late: a new runner takes over")
	})
	t.Run("held: one more window, then it exits", func(t *testing.T) {
		l, w := lingering(), newWait()
		started = nil
		w.start()
		require.True(t, l.hold())
		require.False(t, w.decide(l.windowPassed()))
		require.True(t, w.waiting(), "another window")
		require.Equal(t, []time.Duration{time.Minute, time.Minute}, started)
		require.False(t, l.held, "a hold is used up")
		require.True(t, w.decide(l.windowPassed()))
	})
	t.Run("reopened while lingering", func(t *testing.T) {
		l, w := lingering(), newWait()
		w.start()
		require.True(t, l.hold())
		require.NoError(t, l.fire(reopened))
		// The run loop cancels the wait on a reopen; a window that passed
		// meanwhile does nothing either.
		require.False(t, w.decide(l.windowPassed()))
		require.False(t, w.waiting())
		require.Equal(t, phaseMapping, l.phase)
		require.False(t, l.held)
	})
	t.Run("shutdown", func(t *testing.T) {
		l := lingering()
		require.NoError(t, l.fire(shutdown))
		require.False(t, l.hold())
		exit, again := l.windowPassed()
		require.False(t, exit || again)
	})
}

// The reopen-during-linger race: a DLQ replay holds a lingering runner
// while its window passes. Either the hold wins (the runner lingers once
// more, and the replay's marker reaches it) or the window does (the
// runner exits and the hold fails, so the replay starts a new runner):
// never a successful hold on a runner that exits.
func TestReopenDuringLingerRace(t *testing.T) {
	t.Parallel()
	for i := range 200 {
		r := testRunner(t, &messages.JobSpec{}, 1, nil)
		r.apply(res(0, ok))
		require.Equal(t, phaseLingering, r.life.phase)
		w := &lateWait{window: time.Minute, after: func(time.Duration) <-chan time.Time { return make(chan time.Time) }}
		w.start()

		var held bool
		var wg sync.WaitGroup
		wg.Go(func() { held = r.hold() })
		exit := r.lateWindowPassed(w)
		wg.Wait()
		require.NotEqual(t, held, exit, "round %d: held=%v exit=%v", i, held, exit)
		if held {
			require.True(t, w.waiting(), "a held runner waits once more")
			// The marker arrives during the extra window.
			r.apply(&messages.Result{ItemID: "0", Index: 0, Outcome: messages.OutcomeReopened, Generation: 1})
			require.Equal(t, phaseMapping, r.life.phase)
			require.Equal(t, messages.StateRunning, r.snapshot().Status.State)
		} else {
			require.Equal(t, phaseExited, r.life.phase)
		}
	}
}

// The run loop does the map end's work and the finish's once per round.
func TestLoopDue(t *testing.T) {
	t.Parallel()
	type step struct {
		fire           []trigger
		mapEnd, finish bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"map end and finish at once", []step{
			{[]trigger{caughtUp}, false, false},
			{[]trigger{mapEndFinish}, true, true},
			{nil, false, false},
		}},
		{"a reduce in between", []step{
			{[]trigger{caughtUp}, false, false},
			{[]trigger{mapEndReduce}, true, false},
			{[]trigger{reduceDone}, false, true},
		}},
		{"a restart while reducing", []step{
			{[]trigger{caughtUpReducing}, true, false},
			{[]trigger{reduceDone}, false, true},
		}},
		{"the reduce outcome found while replaying", []step{
			{[]trigger{reduceDone}, false, true},
		}},
		{"reopened and finished again", []step{
			{[]trigger{caughtUp, mapEndFinish}, true, true},
			{[]trigger{reopened}, false, false},
			{[]trigger{mapEndFinish}, true, true},
		}},
		{"ended and reopened before the loop looked", []step{
			{[]trigger{caughtUp}, false, false},
			{[]trigger{mapEndFinish, reopened}, false, false},
		}},
		{"reopened and ended again before the loop looked", []step{
			{[]trigger{caughtUp, mapEndFinish}, true, true},
			{[]trigger{reopened, mapEndReduce}, true, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l lifecycle
			due := newLoopDue()
			for i, s := range tt.steps {
				for _, tr := range s.fire {
					require.NoError(t, l.fire(tr), "step %d", i)
				}
				mapEnd, finish := due.next(l)
				require.Equal(t, s.mapEnd, mapEnd, "step %d: map end", i)
				require.Equal(t, s.finish, finish, "step %d: finish", i)
			}
		})
	}
}

// runnerIn returns a runner of a 4-item job brought to phase p the way
// results bring it there (items 0 and 1 succeeded).
func runnerIn(t *testing.T, p phase, reduce bool) *jobRunner {
	t.Helper()
	spec := &messages.JobSpec{}
	if reduce {
		spec.Reduce = []messages.Step{{Shell: "true"}}
	}
	r := testRunnerReplaying(t, spec, 4, nil)
	r.apply(res(0, ok))
	r.apply(res(1, ok))
	if p == phaseReplaying {
		return r
	}
	r.goLive()
	switch p {
	case phaseReducing, phaseLingering, phaseExited:
		r.apply(res(2, ok))
		r.apply(res(3, dead))
		if reduce && p != phaseReducing {
			r.apply(&messages.Result{Index: -1, Phase: messages.PhaseReduce, Outcome: messages.OutcomeSucceeded, Generation: 1})
		}
	}
	if p == phaseExited {
		r.exit()
	}
	require.Equal(t, p, r.life.phase)
	return r
}

// A stop (cancel, or an error-policy stop) in each phase: taken while
// the map phase runs, refused once it ended; the counts add up after it.
func TestStopInEachPhase(t *testing.T) {
	t.Parallel()
	for _, p := range allPhases {
		for _, reduce := range []bool{false, true} {
			if p == phaseReducing && !reduce {
				continue
			}
			t.Run(fmt.Sprintf("%s/reduce=%v", p, reduce), func(t *testing.T) {
				for _, state := range []string{messages.StateCancelled, messages.StateStopped} {
					r := runnerIn(t, p, reduce)
					taken := !r.ended()
					if !taken {
						// stop answers at once, without the run loop.
						st, err := r.stop(t.Context(), stopRequest{state: state, reason: "why"})
						require.ErrorIs(t, err, errJobFinished)
						require.NotEqual(t, state, st.State)
						continue
					}
					r.endMap(state, "why")
					st := r.snapshot().Status
					require.Equal(t, state, st.MapState)
					if reduce && state != messages.StateCancelled {
						require.Equal(t, phaseReducing, r.life.phase, "a stopped job still reduces")
						require.Equal(t, messages.PhaseReducing, st.Phase)
						require.Equal(t, messages.StateRunning, st.State)
					} else {
						require.Equal(t, phaseLingering, r.life.phase, "a cancelled job does not reduce")
						require.Equal(t, messages.PhaseDone, st.Phase)
						require.Equal(t, state, st.State)
					}
					requireCountsAddUp(t, st)
					require.EqualValues(t, 2, st.NotRun)
					before := r.life
					r.endMap(messages.StateFailed, "again")
					require.Equal(t, before, r.life, "a second end is refused")
					require.Equal(t, state, r.snapshot().Status.MapState)
				}
			})
		}
	}
}

// A coordinator shutdown in each phase: the runner exits whatever its
// phase, decides nothing more, and cannot be held.
func TestShutdownInEachPhase(t *testing.T) {
	t.Parallel()
	for _, p := range allPhases {
		t.Run(p.String(), func(t *testing.T) {
			r := runnerIn(t, p, true)
			before := r.snapshot().Status
			r.exit()
			require.Equal(t, phaseExited, r.life.phase)
			require.False(t, r.hold())
			r.apply(res(2, ok))
			r.apply(res(3, ok))
			st := r.snapshot().Status
			require.Equal(t, before.State, st.State, "nothing is decided after a shutdown")
			require.Equal(t, before.Phase, st.Phase, "the record keeps the phase to resume from")
			_, err := r.stop(t.Context(), stopRequest{state: messages.StateCancelled, reason: messages.CompletionCancelled})
			require.ErrorIs(t, err, errJobFinished)
		})
	}
}

// testRunnerReplaying is testRunner before its results replay caught up.
func testRunnerReplaying(t *testing.T, spec *messages.JobSpec, items int64, groups map[string]int64) *jobRunner {
	t.Helper()
	c := &Coordinator{cfg: Config{}.WithDefaults(), metrics: newMetrics(nil, func() float64 { return 0 })}
	rec := wire.JobRecord{Spec: spec, Status: messages.JobStatus{ID: "j", State: messages.StateRunning, Items: items}}
	if groups != nil {
		rec.Status.Groups = map[string]messages.GroupStatus{}
		for g, n := range groups {
			rec.Status.Groups[g] = messages.GroupStatus{Items: n}
		}
	}
	if spec.BestEffort != nil {
		rec.Status.BestEffort = bestEffortStatus(spec.BestEffort, spec.BestEffort, max(len(groups), 1))
	}
	return newJobRunner(c, rec, 0)
}

// requireCountsAddUp checks the contract at an end: every item in exactly
// one terminal count.
func requireCountsAddUp(t *testing.T, st messages.JobStatus) {
	t.Helper()
	sum := st.Succeeded + st.Failed + st.DeadLettered + st.Skipped + st.NotRun
	require.Equal(t, st.Items, sum, "succeeded %d + failed %d + dead_lettered %d + skipped %d + not_run %d != items %d",
		st.Succeeded, st.Failed, st.DeadLettered, st.Skipped, st.NotRun, st.Items)
	if st.Groups == nil {
		return
	}
	var done, succeeded, failed int64
	for _, g := range st.Groups {
		done, succeeded, failed = done+g.Done, succeeded+g.Succeeded, failed+g.Failed
	}
	// A group counts the items that have an outcome (not_run ones are not done).
	require.Equal(t, st.Items-st.NotRun, done, "the groups' done counts add up")
	require.Equal(t, st.Succeeded, succeeded, "the groups' succeeded counts add up")
	require.Equal(t, st.Failed+st.DeadLettered, failed, "the groups' failed counts add up")
}
