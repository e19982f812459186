package jobrun

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Random histories of a job — results in any order and duplicated,
// results of earlier generations, DLQ reopen markers, cancels and
// error-policy stops, reduce outcomes, a best-effort deadline, a restart's
// replay catching up at any point — keep the contract: whenever the map
// phase has ended (reducing, lingering) every item is in exactly one
// count, and the runner's phase and the record agree. Each history is
// then driven to its end, where the same holds.
func TestCountsAddUpAtEveryEnd(t *testing.T) {
	t.Parallel()
	outcomes := []string{ok, dead, skip, messages.OutcomeFailed}
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 14))
			items := 1 + rng.IntN(6)
			spec := &messages.JobSpec{}
			var groups map[string]int64
			switch rng.IntN(5) {
			case 1:
				spec.Reduce = []messages.Step{{Shell: "true"}}
			case 2:
				spec.ErrorPolicy = &messages.ErrorPolicy{MaxFailures: ptr(2)}
			case 3:
				spec.BestEffort = &messages.BestEffort{MinGroups: 1, LateResults: []string{"log", "update"}[rng.IntN(2)]}
				groups = map[string]int64{}
				for i := range items {
					groups[groupOf(i)]++
				}
			case 4:
				spec.Reduce = []messages.Step{{Shell: "true"}}
				spec.ErrorPolicy = &messages.ErrorPolicy{ContinueOnFailure: ptr(false)}
			}
			r := testRunnerReplaying(t, spec, int64(items), groups)
			clk := &fakeClock{t: time.Unix(1000, 0)}
			r.c.cfg.hooks.Clock = clk
			if spec.BestEffort != nil {
				dl := clk.t.Add(time.Minute)
				r.rec.Deadline = &dl
			}
			gens := make([]int, items)
			result := func(i int, outcome string, gen int) *messages.Result {
				x := res(i, outcome)
				x.Generation, x.Group = gen, groupOf(i)
				if groups == nil {
					x.Group = ""
				}
				return x
			}
			for step := range 40 {
				i := rng.IntN(items)
				switch a := rng.IntN(20); {
				case a < 11:
					r.apply(result(i, outcomes[rng.IntN(len(outcomes))], gens[i]))
				case a < 12 && gens[i] > 0:
					r.apply(result(i, ok, gens[i]-1)) // an overtaken generation
				case a < 14:
					gens[i]++
					r.apply(&messages.Result{ItemID: fmt.Sprint(i), Index: int64(i), Group: result(i, ok, 0).Group,
						Outcome: messages.OutcomeReopened, Generation: gens[i]})
				case a < 15:
					r.endMap(messages.StateCancelled, messages.CompletionCancelled)
				case a < 16:
					r.endMap(messages.StateStopped, messages.CompletionMaxFailures)
				case a < 17:
					applyReduce(r, rng)
				case a < 18:
					clk.t = clk.t.Add(30 * time.Second)
					r.tick()
				default:
					if r.life.phase == phaseReplaying {
						r.goLive()
					}
				}
				checkPhaseAndCounts(t, r, step)
			}
			// To the end: caught up, every item's latest generation has an
			// outcome, and a reduce (if any) reports.
			if !r.life.live {
				r.goLive()
			}
			for i := range items {
				r.apply(result(i, ok, gens[i]))
			}
			applyReduce(r, rng)
			checkPhaseAndCounts(t, r, -1)
			require.Equal(t, phaseLingering, r.life.phase)
			st := r.snapshot().Status
			require.True(t, messages.TerminalState(st.State), st.State)
			requireCountsAddUp(t, st)
		})
	}
}

func groupOf(i int) string { return []string{"a", "b"}[i%2] }

// applyReduce reports the reduce item's outcome when one is awaited.
func applyReduce(r *jobRunner, rng *rand.Rand) {
	r.mu.Lock()
	rd := r.rec.Status.Reduce
	r.mu.Unlock()
	if rd == nil || rd.State != "pending" {
		return
	}
	outcome := []string{ok, messages.OutcomeFailed}[rng.IntN(2)]
	r.apply(&messages.Result{ItemID: messages.ReduceItemID, Index: -1, Phase: messages.PhaseReduce, Outcome: outcome, Generation: rd.Generation})
}

// checkPhaseAndCounts checks what holds after any step.
func checkPhaseAndCounts(t *testing.T, r *jobRunner, step int) {
	t.Helper()
	st := r.snapshot().Status
	switch r.life.phase {
	case phaseReplaying:
		require.Equal(t, messages.StateRunning, st.State, "step %d", step)
	case phaseMapping:
		require.Equal(t, messages.StateRunning, st.State, "step %d", step)
		require.Equal(t, messages.PhaseMap, st.Phase, "step %d", step)
		require.Nil(t, st.FinishedAt, "step %d", step)
	case phaseReducing:
		require.Equal(t, messages.StateRunning, st.State, "step %d", step)
		require.Equal(t, messages.PhaseReducing, st.Phase, "step %d", step)
		require.Equal(t, "pending", st.Reduce.State, "step %d", step)
		requireCountsAddUp(t, st)
	case phaseLingering:
		require.True(t, messages.TerminalState(st.State), "step %d: %s", step, st.State)
		require.Equal(t, messages.PhaseDone, st.Phase, "step %d", step)
		require.NotNil(t, st.FinishedAt, "step %d", step)
		require.NotEmpty(t, st.CompletionReason, "step %d", step)
		requireCountsAddUp(t, st)
	default:
		t.Fatalf("step %d: phase %s", step, r.life.phase)
	}
	require.LessOrEqual(t, st.Done(), st.Items, "step %d: no item counted twice", step)
}

// A late result that amends a best-effort job (late_results: update)
// counts in its group too, and a reopen of a not_run item takes nothing
// from its group: not_run items were never in a group's counts.
func TestLateResultCountsInItsGroup(t *testing.T) {
	t.Parallel()
	groups := map[string]int64{"a": 2, "b": 2}
	r := testRunner(t, &messages.JobSpec{BestEffort: &messages.BestEffort{MinGroups: 1, LateResults: "update"}}, 4, groups)
	item := func(i int, g, outcome string) *messages.Result {
		x := res(i, outcome)
		x.Group = g
		return x
	}
	r.apply(item(0, "a", ok))
	r.apply(item(1, "a", ok)) // group a complete: min_groups reached
	st := r.snapshot().Status
	require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
	require.Equal(t, messages.GroupStatus{Items: 2}, st.Groups["b"], "b's items are not_run, not done")

	r.apply(item(2, "b", ok)) // late
	st = r.snapshot().Status
	require.Equal(t, messages.GroupStatus{Items: 2, Done: 1, Succeeded: 1}, st.Groups["b"])
	requireCountsAddUp(t, st)

	r.apply(&messages.Result{ItemID: "3", Index: 3, Group: "b", Outcome: messages.OutcomeReopened, Generation: 1})
	st = r.snapshot().Status
	require.Equal(t, messages.GroupStatus{Items: 2, Done: 1, Succeeded: 1}, st.Groups["b"], "the reopened item was not_run")
	again := item(3, "b", ok)
	again.Generation = 1
	r.apply(again)
	st = r.snapshot().Status
	require.Equal(t, messages.GroupStatus{Items: 2, Done: 2, Succeeded: 2}, st.Groups["b"])
	require.Equal(t, messages.StateSucceeded, st.State)
	requireCountsAddUp(t, st)
}
