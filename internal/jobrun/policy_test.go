package jobrun

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func ptr[T any](v T) *T { return &v }

// testRunner is a runner without NATS: apply and the policies are pure
// bookkeeping under its lock.
func testRunner(t *testing.T, spec *messages.JobSpec, items int64, groups map[string]int64) *jobRunner {
	t.Helper()
	r := testRunnerReplaying(t, spec, items, groups)
	r.goLive()
	return r
}

func res(i int, outcome string) *messages.Result {
	return &messages.Result{ItemID: fmt.Sprint(i), Index: int64(i), Outcome: outcome, Signature: "sig", Error: "boom"}
}

const (
	ok   = messages.OutcomeSucceeded
	dead = messages.OutcomeDeadLettered
	skip = messages.OutcomeSkipped
)

func TestRunnerPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     *messages.ErrorPolicy
		items      int64
		outcomes   []string // in order, item i gets outcomes[i]
		wantState  string   // "" = still running
		wantReason string
		wantNotRun int64
	}{
		{"all succeed", nil, 3, []string{ok, ok, ok}, messages.StateSucceeded, messages.CompletionAllCompleted, 0},
		{"one dead letter fails the job", nil, 3, []string{ok, dead, ok}, messages.StateFailed, messages.CompletionAllCompleted, 0},
		{"skipped items do not fail it", nil, 2, []string{ok, skip}, messages.StateSucceeded, messages.CompletionAllCompleted, 0},
		{"max_failures: below N keeps running", &messages.ErrorPolicy{MaxFailures: ptr(2)}, 5, []string{dead, ok, ok}, "", "", 0},
		{"max_failures: at N stops", &messages.ErrorPolicy{MaxFailures: ptr(2)}, 5, []string{dead, ok, dead}, messages.StateStopped, messages.CompletionMaxFailures, 2},
		{"max_failures counts skipped items", &messages.ErrorPolicy{MaxFailures: ptr(2)}, 5, []string{skip, skip}, messages.StateStopped, messages.CompletionMaxFailures, 3},
		{"threshold: not before 10 finished", &messages.ErrorPolicy{FailureThreshold: ptr(0.25)}, 20, []string{dead, dead, dead, ok, ok, ok, ok, ok, ok}, "", "", 0},
		{"threshold: the 10th item (a success) trips it", &messages.ErrorPolicy{FailureThreshold: ptr(0.25)}, 20, []string{dead, dead, dead, ok, ok, ok, ok, ok, ok, ok}, messages.StateStopped, messages.CompletionFailureThreshold, 10},
		{"threshold: equal is not above", &messages.ErrorPolicy{FailureThreshold: ptr(0.3)}, 20, []string{dead, dead, dead, ok, ok, ok, ok, ok, ok, ok}, "", "", 0},
		{"first failure", &messages.ErrorPolicy{ContinueOnFailure: ptr(false)}, 4, []string{ok, dead}, messages.StateStopped, messages.CompletionFirstFailure, 2},
		{"on_item_failure stop", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureStop}}, 4, []string{dead}, messages.StateStopped, messages.CompletionItemStop, 3},
		{"a stop on the last item still stops", &messages.ErrorPolicy{MaxFailures: ptr(1)}, 2, []string{ok, dead}, messages.StateStopped, messages.CompletionMaxFailures, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRunner(t, &messages.JobSpec{ErrorPolicy: tt.policy}, tt.items, nil)
			for i, o := range tt.outcomes {
				r.apply(res(i, o))
			}
			st := r.snapshot().Status
			if tt.wantState == "" {
				require.False(t, r.life.ended(), "%+v", st)
				require.Equal(t, messages.StateRunning, st.State)
				return
			}
			require.Equal(t, tt.wantState, st.State)
			require.Equal(t, tt.wantReason, st.CompletionReason)
			require.Equal(t, tt.wantNotRun, st.NotRun)
			require.Equal(t, st.Items, st.Done())
		})
	}
}

func TestRunnerBestEffort(t *testing.T) {
	t.Parallel()
	groups := map[string]int64{"a": 2, "b": 2, "c": 2}
	item := func(i int, g, outcome string) *messages.Result {
		r := res(i, outcome)
		r.Group = g
		return r
	}
	t.Run("min_groups reached ends the map phase with success", func(t *testing.T) {
		r := testRunner(t, &messages.JobSpec{BestEffort: &messages.BestEffort{MinGroups: 2, LateResults: "log"}}, 6, groups)
		r.apply(item(0, "a", ok))
		r.apply(item(1, "a", ok))
		r.apply(item(2, "b", ok))
		require.False(t, r.life.ended())
		r.apply(item(3, "b", ok))
		st := r.snapshot().Status
		require.Equal(t, messages.StateSucceeded, st.State)
		require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
		require.EqualValues(t, 2, st.NotRun)
		require.Equal(t, 2, st.BestEffort.GroupsCompleted)
		require.True(t, st.BestEffort.Success)

		// A late result is logged, not aggregated, and counted once.
		r.apply(item(4, "c", ok))
		r.apply(item(4, "c", ok))
		st = r.snapshot().Status
		require.EqualValues(t, 1, st.LateResults)
		require.EqualValues(t, 4, st.Succeeded)
		require.EqualValues(t, 2, st.NotRun)
	})
	t.Run("a group with a dead letter is not complete", func(t *testing.T) {
		r := testRunner(t, &messages.JobSpec{BestEffort: &messages.BestEffort{MinGroups: 2, LateResults: "update"}}, 6, groups)
		r.apply(item(0, "a", ok))
		r.apply(item(1, "a", dead))
		r.apply(item(2, "b", ok))
		r.apply(item(3, "b", ok))
		require.False(t, r.life.ended(), "only b is complete")
		r.apply(item(4, "c", ok))
		r.apply(item(5, "c", ok))
		st := r.snapshot().Status
		require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason, "every item ended")
		require.Equal(t, messages.StateSucceeded, st.State, "b and c complete: 2 >= min_groups")
		require.Equal(t, 2, st.BestEffort.GroupsCompleted)
	})
	t.Run("deadline: success only with min_groups", func(t *testing.T) {
		clk := &fakeClock{t: time.Unix(1000, 0)}
		r := testRunner(t, &messages.JobSpec{BestEffort: &messages.BestEffort{MinGroups: 2, LateResults: "update"}}, 6, groups)
		r.c.cfg.hooks.Clock = clk
		dl := clk.t.Add(time.Minute)
		r.rec.Deadline = &dl
		r.apply(item(0, "a", ok))
		r.apply(item(1, "a", ok))
		r.tick()
		require.False(t, r.life.ended(), "before the deadline")
		clk.t = dl
		r.tick()
		st := r.snapshot().Status
		require.Equal(t, messages.CompletionDeadline, st.CompletionReason)
		require.Equal(t, messages.StateFailed, st.State)
		require.False(t, st.BestEffort.Success)
		require.EqualValues(t, 4, st.NotRun)

		// late_results: update amends the counts.
		r.apply(item(2, "b", ok))
		st = r.snapshot().Status
		require.EqualValues(t, 3, st.Succeeded)
		require.EqualValues(t, 3, st.NotRun)
		require.EqualValues(t, 1, st.LateResults)
	})
}

func TestBestEffortClamp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		req, groups   int
		want          int
		clampContains string
	}{
		{0, 3, 1, "raised"},
		{2, 3, 2, ""},
		{3, 3, 3, ""},
		{5, 3, 3, "lowered"},
		{2, 0, 1, "lowered"}, // an empty job has one (empty) group
	}
	for _, tt := range tests {
		be := bestEffortStatus(&messages.BestEffort{MinGroups: tt.req}, &messages.BestEffort{MinGroups: tt.req}, tt.groups)
		require.Equal(t, tt.want, be.MinGroups, "%+v", tt)
		require.Equal(t, tt.req, be.RequestedMinGroups)
		if tt.clampContains == "" {
			require.Empty(t, be.Clamped)
		} else {
			require.Contains(t, be.Clamped, tt.clampContains)
		}
	}
}

func TestRunnerReopen(t *testing.T) {
	t.Parallel()
	r := testRunner(t, &messages.JobSpec{}, 3, nil)
	r.apply(res(0, ok))
	r.apply(res(1, dead))
	r.apply(res(2, ok))
	st := r.snapshot().Status
	require.Equal(t, messages.StateFailed, st.State)

	reopen := &messages.Result{ItemID: "1", Index: 1, Outcome: messages.OutcomeReopened, Generation: 1}
	r.apply(reopen)
	r.apply(reopen) // a duplicate marker changes nothing
	st = r.snapshot().Status
	require.Equal(t, messages.StateRunning, st.State)
	require.Zero(t, st.DeadLettered)
	require.EqualValues(t, 2, st.Done())

	r.apply(res(1, dead)) // a late copy of the old generation's result is ignored
	require.Equal(t, messages.StateRunning, r.snapshot().Status.State)
	again := res(1, ok)
	again.Generation = 1
	r.apply(again)
	st = r.snapshot().Status
	require.Equal(t, messages.StateSucceeded, st.State)
	require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason)
	require.EqualValues(t, 3, st.Succeeded)
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

// After waits in real time: these tests set the time they read, not the
// waits.
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
