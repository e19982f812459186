package retry

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// step runs Decide over a sequence of failures, advancing the clock by each
// granted delay plus run time, and returns the decisions.
func step(t *testing.T, p *Policy, run time.Duration, fs ...Failure) []Decision {
	t.Helper()
	now := t0
	var st State
	var out []Decision
	for _, f := range fs {
		now = now.Add(run)
		d := p.Decide(now, st, f, nil)
		out = append(out, d)
		if d.Action == ActionGiveUp {
			break
		}
		st = d.State
		now = now.Add(d.Delay)
	}
	return out
}

func repeat(f Failure, n int) []Failure {
	out := make([]Failure, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func TestDecideBudgetKeepsLastError(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(10), InitialDelay: dur("1s"), RetryBudget: dur("5s")})
	require.NoError(t, err)
	errs := []error{errors.New("fail 1"), errors.New("fail 2"), errors.New("fail 3")}
	var fs []Failure
	for _, e := range errs {
		fs = append(fs, Failure{Err: e})
	}
	ds := step(t, p, 0, fs...)
	require.Len(t, ds, 3)
	require.Equal(t, ActionRetry, ds[0].Action)
	require.Equal(t, time.Second, ds[0].Delay)
	require.Equal(t, ActionRetry, ds[1].Action)
	require.Equal(t, 2*time.Second, ds[1].Delay)
	last := ds[2]
	require.Equal(t, ActionGiveUp, last.Action)
	require.Equal(t, messages.ReasonRetryBudget, last.Reason)
	require.ErrorIs(t, last.Err, errs[2], "the last error is kept")
	require.ErrorIs(t, last.Err, ErrBudgetExhausted)
	require.NotErrorIs(t, last.Err, ErrAttemptsExhausted)
	var gu *GiveUpError
	require.ErrorAs(t, last.Err, &gu)
	require.Equal(t, 3, gu.Attempts)
	require.Equal(t, "retry: retry budget exhausted after 3 attempts: fail 3", last.Err.Error())
	require.Equal(t, 3*time.Second, last.State.DelaySpent)
	require.Equal(t, 4*time.Second, last.Refused)
	require.Zero(t, last.Delay)
	require.Equal(t, t0, last.State.FirstFailure)
}

// Time alone never exhausts a retry_budget: a decision an hour after the
// first failure grants what the delay accounting has left.
func TestDecideBudgetIgnoresTheClock(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(10), Backoff: &messages.Backoff{Kind: messages.BackoffFixed}, InitialDelay: dur("1s"), RetryBudget: dur("1m")})
	require.NoError(t, err)
	st := State{Attempts: 2, FirstFailure: t0, DelaySpent: 58 * time.Second, LastDelay: time.Second}
	d := p.Decide(t0.Add(time.Hour), st, Failure{Message: "x"}, nil)
	require.Equal(t, ActionRetry, d.Action, "58s + 1s <= 1m, however late")
	require.Equal(t, 59*time.Second, d.State.DelaySpent)
	st.DelaySpent = 59*time.Second + time.Millisecond
	d = p.Decide(t0.Add(time.Second), st, Failure{Message: "x"}, nil)
	require.Equal(t, ActionGiveUp, d.Action, "59.001s + 1s > 1m, however early")
	require.Equal(t, messages.ReasonRetryBudget, d.Reason)
	require.Equal(t, time.Second, d.Refused)
}

func TestDecideReasons(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(3), RetryOn: []messages.Matcher{{Builtin: messages.MatchNetwork}}})
	require.NoError(t, err)
	netErr := Failure{Message: "connection refused"}

	ds := step(t, p, 0, repeat(netErr, 5)...)
	require.Len(t, ds, 3)
	require.Equal(t, []Action{ActionRetry, ActionRetry, ActionGiveUp}, []Action{ds[0].Action, ds[1].Action, ds[2].Action})
	require.Equal(t, messages.ReasonAttempts, ds[2].Reason)
	require.ErrorIs(t, ds[2].Err, ErrAttemptsExhausted)
	require.Equal(t, messages.MatchNetwork, ds[2].Class)
	require.Equal(t, 3, ds[2].State.Attempts)

	ds = step(t, p, 0, Failure{Message: "syntax error", ExitCode: ptr(2)})
	require.Equal(t, ActionGiveUp, ds[0].Action)
	require.Equal(t, messages.ReasonNotRetryable, ds[0].Reason)
	require.ErrorIs(t, ds[0].Err, ErrNotRetryable)
	require.Equal(t, ClassError, ds[0].Class)
	require.Equal(t, 1, ds[0].State.Attempts)
}

func TestDecideMarkers(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(5), InitialDelay: dur("1s"), MaxDelay: dur("10s"),
		RetryBudget: dur("1m"), RetryOn: []messages.Matcher{{Builtin: messages.MatchNetwork}}})
	require.NoError(t, err)
	cause := errors.New("invalid token")
	st := State{Attempts: 1, FirstFailure: t0, DelaySpent: time.Second, LastDelay: time.Second}

	tests := []struct {
		name      string
		err       error
		action    Action
		delay     time.Duration
		reason    string
		attempts  int
		spent     time.Duration
		wantIs    error
		wantCause bool
	}{
		{"permanent wrapped", fmt.Errorf("upload: %w", Permanent(cause)), ActionGiveUp, 0, messages.ReasonPermanent, 2, time.Second, ErrPermanent, true},
		{"permanent beats after", Permanent(After(time.Second, cause)), ActionGiveUp, 0, messages.ReasonPermanent, 2, time.Second, ErrPermanent, true},
		{"after wrapped, above max_delay, not matched by retry_on", fmt.Errorf("api: %w", After(20*time.Second, cause)), ActionRetry, 20 * time.Second, "", 2, 21 * time.Second, nil, false},
		{"after negative is zero", After(-time.Second, cause), ActionRetry, 0, "", 2, time.Second, nil, false},
		{"after over budget", After(time.Hour, cause), ActionGiveUp, 0, messages.ReasonRetryBudget, 2, time.Second, ErrBudgetExhausted, true},
		{"snooze wrapped spends nothing", fmt.Errorf("not ready: %w", Snooze(45*time.Second)), ActionSnooze, 45 * time.Second, "", 1, time.Second, nil, false},
		{"plain error not matched", cause, ActionGiveUp, 0, messages.ReasonNotRetryable, 2, time.Second, ErrNotRetryable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(t0.Add(5*time.Second), st, Failure{Err: tt.err}, nil)
			require.Equal(t, tt.action, d.Action)
			require.Equal(t, tt.delay, d.Delay)
			require.Equal(t, tt.reason, d.Reason)
			require.Equal(t, tt.attempts, d.State.Attempts)
			require.Equal(t, tt.spent, d.State.DelaySpent)
			if tt.wantIs != nil {
				require.ErrorIs(t, d.Err, tt.wantIs)
			} else {
				require.NoError(t, d.Err)
			}
			if tt.wantCause {
				require.ErrorIs(t, d.Err, cause)
				require.ErrorIs(t, d.Err, tt.err)
			}
		})
	}
}

func TestMarkerAccessors(t *testing.T) {
	base := errors.New("base")
	tests := []struct {
		name      string
		err       error
		permanent bool
		after     time.Duration
		afterOK   bool
		snooze    time.Duration
		snoozeOK  bool
	}{
		{"plain", base, false, 0, false, 0, false},
		{"nil", nil, false, 0, false, 0, false},
		{"permanent", Permanent(base), true, 0, false, 0, false},
		{"permanent nil is still an error", Permanent(nil), true, 0, false, 0, false},
		{"permanent wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", Permanent(base))), true, 0, false, 0, false},
		{"after", After(3*time.Second, base), false, 3 * time.Second, true, 0, false},
		{"after wrapped", fmt.Errorf("x: %w", After(time.Second, nil)), false, time.Second, true, 0, false},
		{"snooze", Snooze(time.Minute), false, 0, false, time.Minute, true},
		{"snooze joined", errors.Join(base, Snooze(time.Minute)), false, 0, false, time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.permanent, IsPermanent(tt.err))
			d, ok := AfterDelay(tt.err)
			require.Equal(t, tt.afterOK, ok)
			require.Equal(t, tt.after, d)
			d, ok = SnoozeDelay(tt.err)
			require.Equal(t, tt.snoozeOK, ok)
			require.Equal(t, tt.snooze, d)
		})
	}
	require.NotNil(t, Permanent(nil))
	require.EqualError(t, Permanent(nil), "permanent error")
	require.ErrorIs(t, Permanent(base), base)
	require.ErrorIs(t, After(time.Second, base), base)
	require.EqualError(t, After(time.Second, nil), "retry after 1s")
	require.EqualError(t, Snooze(time.Second), "snooze 1s")
}

func TestStateItemStateRoundTrip(t *testing.T) {
	st := State{Attempts: 2, FirstFailure: t0, DelaySpent: 3 * time.Second, LastDelay: 2 * time.Second}
	var is wire.ItemState
	st.ApplyTo(&is)
	require.Equal(t, 2, is.StepAttempt)
	require.Equal(t, t0, is.StepFirstFailure)
	require.Equal(t, messages.MustDuration("3s"), is.StepDelaySpent)
	require.Equal(t, messages.MustDuration("2s"), is.LastDelay)
	require.Equal(t, st, StateFromItem(&is))

	// Through the JSON the fleet_items bucket stores.
	b, err := json.Marshal(&is)
	require.NoError(t, err)
	var back wire.ItemState
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, st, StateFromItem(&back))

	State{}.ApplyTo(&is)
	require.Equal(t, State{}, StateFromItem(&is))
	require.Equal(t, State{}, StateFromItem(nil))

	// A state an earlier agent wrote, with the wall-clock expiry it kept
	// then, still reads: the expiry is ignored.
	var old wire.ItemState
	require.NoError(t, json.Unmarshal([]byte(`{"job_id":"j","item_id":"i","step_attempt":1,"step_first_failure":"2025-01-02T03:04:05Z","step_budget_expiry":"2025-01-02T03:04:10Z","step_delay_spent":"1s"}`), &old))
	require.Equal(t, State{Attempts: 1, FirstFailure: t0, DelaySpent: time.Second}, StateFromItem(&old))
}

func TestStateJSON(t *testing.T) {
	st := State{Attempts: 2, FirstFailure: t0, DelaySpent: 1500 * time.Millisecond, LastDelay: time.Second}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.JSONEq(t, `{"attempts":2,"first_failure":"2025-01-02T03:04:05Z","delay_spent":"1s500ms","last_delay":"1s"}`, string(b))
	var back State
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, st, back)

	b, err = json.Marshal(State{})
	require.NoError(t, err)
	require.JSONEq(t, `{"attempts":0,"delay_spent":"0s","last_delay":"0s"}`, string(b))
}

// The state persisted after each decision is all an agent needs: a fresh
// policy object (another agent) continues the same timeline.
func TestDecideResumesFromPersistedState(t *testing.T) {
	cfg := &messages.RetryConfig{Attempts: ptr(5), InitialDelay: dur("1s"), RetryBudget: dur("10s")}
	var delays []time.Duration
	var st State
	now := t0
	for i := 0; i < 5; i++ {
		p, err := NewPolicy(cfg) // a different agent each time
		require.NoError(t, err)
		var is wire.ItemState
		st.ApplyTo(&is)
		b, err := json.Marshal(&is)
		require.NoError(t, err)
		var loaded wire.ItemState
		require.NoError(t, json.Unmarshal(b, &loaded))
		d := p.Decide(now, StateFromItem(&loaded), Failure{Message: "boom"}, nil)
		if d.Action != ActionRetry {
			require.Equal(t, messages.ReasonRetryBudget, d.Reason)
			break
		}
		delays = append(delays, d.Delay)
		st = d.State
		now = now.Add(d.Delay)
	}
	require.Equal(t, secs(1, 2, 4), delays)
}

func TestActionString(t *testing.T) {
	require.Equal(t, "retry", ActionRetry.String())
	require.Equal(t, "give_up", ActionGiveUp.String())
	require.Equal(t, "snooze", ActionSnooze.String())
	require.Equal(t, "Action(9)", Action(9).String())
}

func TestPlanWithSeededJitter(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(6), Jitter: true})
	require.NoError(t, err)
	a, b := p.Plan(NewRand(1)), p.Plan(NewRand(1))
	require.Equal(t, a, b, "same seed, same plan")
	require.NotEqual(t, secs(1, 2, 4, 8, 16), a.Delays)
	require.Equal(t, secs(1, 2, 4, 8, 16), p.WithoutJitter().Plan(NewRand(1)).Delays)
}

func TestFailureAction(t *testing.T) {
	tests := []struct {
		name    string
		of      *messages.OnFailure
		want    FailureAction
		wantErr bool
	}{
		{"nil is stop", nil, FailureAction{Action: messages.OnFailureStop}, false},
		{"stop", &messages.OnFailure{Action: "stop"}, FailureAction{Action: messages.OnFailureStop}, false},
		{"continue", &messages.OnFailure{Action: "continue"}, FailureAction{Action: messages.OnFailureContinue}, false},
		{"fallback", &messages.OnFailure{Action: "fallback", Fallback: "save.sh"}, FailureAction{Action: messages.OnFailureFallback, Fallback: "save.sh", Runs: 1}, false},
		{"fallback that reruns its step", &messages.OnFailure{Action: "fallback", Fallback: "fix.sh", MaxAttempts: 3, HandlerFailureFatal: true, Timeout: messages.Duration(time.Minute)},
			FailureAction{Action: messages.OnFailureFallback, Fallback: "fix.sh", Runs: 3, HandlerFatal: true, Timeout: time.Minute}, false},
		{"fallback without command", &messages.OnFailure{Action: "fallback"}, FailureAction{Action: messages.OnFailureStop}, true},
		{"unknown", &messages.OnFailure{Action: "explode"}, FailureAction{Action: messages.OnFailureStop}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewFailureAction(tt.of)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, a)
			require.Equal(t, tt.want.Action == messages.OnFailureFallback, a.NeedsFallback())
			require.Equal(t, tt.want.Runs > 1, a.Reruns())
		})
	}
}

// An assessment decides every later attempt exactly as Decide does with the
// failure itself: same action, delay, reason, class, error and state, for
// each kind of failure and at each attempt.
func TestDecideAssessedMatchesDecide(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{
		Attempts: ptr(4), InitialDelay: dur("1s"), RetryBudget: dur("10s"), Jitter: true,
		RetryOn: []messages.Matcher{{Builtin: messages.MatchNetwork}},
	})
	require.NoError(t, err)
	code := 7
	failures := map[string]Failure{
		"retryable":     {Message: "dial tcp 10.0.0.1:443: connection refused"},
		"not retryable": {Message: "invalid input", ExitCode: &code},
		"permanent":     {Err: Permanent(errors.New("connection refused"))},
		"snooze":        {Err: Snooze(3 * time.Second)},
		"after":         {Err: After(4*time.Second, errors.New("429 Too Many Requests"))},
		"timeout":       {TimedOut: true},
	}
	for name, f := range failures {
		t.Run(name, func(t *testing.T) {
			a := p.Assess(f)
			require.Equal(t, Classify(f), a.Class())
			require.Equal(t, f.Error(), a.Err())
			var st State
			now := t0
			for n := 0; n < 6; n++ {
				want := p.Decide(now, st, f, fixedRand(0.25))
				got := p.DecideAssessed(now, st, a, fixedRand(0.25))
				require.Equal(t, want, got, "attempt %d", n+1)
				if got.Action == ActionGiveUp {
					return
				}
				st, now = got.State, now.Add(got.Delay+time.Second)
			}
		})
	}
}

// retry_budget counts only the backoff delays, never run time (docs/retries.md
// §4): a step whose runs take 1s each, with fixed 500ms and a 2s budget,
// gets the four retries the delays allow (0.5 + 0.5 + 0.5 + 0.5 = 2s), as
// with runs that take no time, and `backoff plan` says so too.
func TestDecideBudgetCountsOnlyDelays(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(100), Backoff: &messages.Backoff{Kind: messages.BackoffFixed},
		InitialDelay: dur("500ms"), RetryBudget: dur("2s")})
	require.NoError(t, err)
	for _, run := range []time.Duration{0, time.Second, time.Minute} {
		ds := step(t, p, run, repeat(Failure{Message: "x"}, 10)...)
		require.Len(t, ds, 5, "run time %s: four retries, then the budget", run)
		for _, d := range ds[:4] {
			require.Equal(t, ActionRetry, d.Action)
			require.Equal(t, 500*time.Millisecond, d.Delay)
		}
		last := ds[4]
		require.Equal(t, ActionGiveUp, last.Action)
		require.Equal(t, messages.ReasonRetryBudget, last.Reason)
		require.Equal(t, 2*time.Second, last.State.DelaySpent)
		require.Equal(t, 500*time.Millisecond, last.Refused)
	}
	require.Equal(t, secs(0.5, 0.5, 0.5, 0.5), p.Plan(nil).Delays)
}

// Jitter counts against retry_budget as granted: delay_spent is the sum of
// the jittered delays, and the budget refuses the jittered next delay. The
// same seed drawn beside the decisions gives the delays they granted.
func TestJitterCountsAgainstTheRetryBudget(t *testing.T) {
	p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(1000), Backoff: &messages.Backoff{Kind: messages.BackoffFixed},
		InitialDelay: dur("1s"), Jitter: true, JitterFactor: ptr(0.5), RetryBudget: dur("10s")})
	require.NoError(t, err)
	for seed := uint64(1); seed <= 50; seed++ {
		r, mirror := NewRand(seed), NewRand(seed)
		var st State
		var sum time.Duration
		for n := 1; ; n++ {
			d := p.Decide(t0, st, Failure{Message: "x"}, r)
			want := p.Delay(n, st.LastDelay, mirror) // what the decision drew
			if d.Action == ActionGiveUp {
				require.Equal(t, messages.ReasonRetryBudget, d.Reason)
				require.Equal(t, want, d.Refused, "the jittered delay is refused")
				require.Greater(t, sum+want, 10*time.Second)
				require.Equal(t, sum, d.State.DelaySpent)
				break
			}
			require.Equal(t, want, d.Delay)
			sum += d.Delay
			require.Equal(t, sum, d.State.DelaySpent, "seed %d, retry %d", seed, n)
			require.LessOrEqual(t, sum, 10*time.Second)
			st = d.State
		}
	}
	// Without jitter, 10 retries of 1s; with ±50% the count varies by seed.
	require.Len(t, p.WithoutJitter().Plan(nil).Delays, 10)
}
