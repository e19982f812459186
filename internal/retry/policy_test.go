package retry

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestPlanTimelines(t *testing.T) {
	tests := []struct {
		name      string
		cfg       *messages.RetryConfig
		want      []time.Duration
		stoppedBy string
	}{
		{
			name:      "exponential 1s base 2",
			cfg:       &messages.RetryConfig{Attempts: ptr(6), Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 2}, InitialDelay: dur("1s")},
			want:      secs(1, 2, 4, 8, 16),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "exponential is the default",
			cfg:       &messages.RetryConfig{Attempts: ptr(6)},
			want:      secs(1, 2, 4, 8, 16),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "exponential capped at max_delay",
			cfg:       &messages.RetryConfig{Attempts: ptr(8), InitialDelay: dur("1s"), MaxDelay: dur("10s")},
			want:      secs(1, 2, 4, 8, 10, 10, 10),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "exponential base 3",
			cfg:       &messages.RetryConfig{Attempts: ptr(5), Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 3}, MaxDelay: dur("1m")},
			want:      secs(1, 3, 9, 27),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "fibonacci",
			cfg:       &messages.RetryConfig{Attempts: ptr(7), Backoff: &messages.Backoff{Kind: messages.BackoffFibonacci}, InitialDelay: dur("1s")},
			want:      secs(1, 1, 2, 3, 5, 8),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "linear 1s + 2s",
			cfg:       &messages.RetryConfig{Attempts: ptr(5), Backoff: &messages.Backoff{Kind: messages.BackoffLinear, Increment: dur("2s")}, InitialDelay: dur("1s")},
			want:      secs(1, 3, 5, 7),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "linear increment defaults to initial_delay",
			cfg:       &messages.RetryConfig{Attempts: ptr(4), Backoff: &messages.Backoff{Kind: messages.BackoffLinear}, InitialDelay: dur("2s")},
			want:      secs(2, 4, 6),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name: "custom then max_delay",
			cfg: &messages.RetryConfig{Attempts: ptr(6), MaxDelay: dur("60s"), Backoff: &messages.Backoff{Kind: messages.BackoffCustom,
				Delays: []messages.Duration{messages.MustDuration("1s"), messages.MustDuration("3s"), messages.MustDuration("7s"), messages.MustDuration("15s")}}},
			want:      secs(1, 3, 7, 15, 60),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "custom with no delays uses max_delay",
			cfg:       &messages.RetryConfig{Attempts: ptr(3), MaxDelay: dur("20s"), Backoff: &messages.Backoff{Kind: messages.BackoffCustom}},
			want:      secs(20, 20),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "fixed 5s attempts 3 is two retries",
			cfg:       &messages.RetryConfig{Attempts: ptr(3), Backoff: &messages.Backoff{Kind: messages.BackoffFixed}, InitialDelay: dur("5s"), RetryBudget: dur("10m")},
			want:      secs(5, 5),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "legacy initial overrides initial_delay",
			cfg:       &messages.RetryConfig{Attempts: ptr(3), Backoff: &messages.Backoff{Kind: messages.BackoffFixed, Initial: dur("2s")}, InitialDelay: dur("9s")},
			want:      secs(2, 2),
			stoppedBy: messages.ReasonAttempts,
		},
		{
			name:      "5s budget stops before the third retry",
			cfg:       &messages.RetryConfig{Attempts: ptr(10), InitialDelay: dur("1s"), RetryBudget: dur("5s")},
			want:      secs(1, 2),
			stoppedBy: messages.ReasonRetryBudget,
		},
		{
			name:      "2m budget over exponential",
			cfg:       &messages.RetryConfig{Attempts: ptr(100), InitialDelay: dur("1s"), MaxDelay: dur("1h"), RetryBudget: dur("2m")},
			want:      secs(1, 2, 4, 8, 16, 32),
			stoppedBy: messages.ReasonRetryBudget,
		},
		{
			name:      "one attempt, no retry",
			cfg:       &messages.RetryConfig{Attempts: ptr(1)},
			want:      []time.Duration{},
			stoppedBy: messages.ReasonAttempts,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPolicy(tt.cfg)
			require.NoError(t, err)
			plan := p.Plan(nil)
			require.Equal(t, tt.want, plan.Delays)
			require.Equal(t, tt.stoppedBy, plan.StoppedBy)
			var total time.Duration
			for _, d := range tt.want {
				total += d
			}
			require.Equal(t, total, plan.Total)
			if tt.stoppedBy == messages.ReasonRetryBudget {
				require.Equal(t, p.BaseDelay(len(tt.want)+1), plan.Refused)
			} else {
				require.Zero(t, plan.Refused)
			}
		})
	}
}

func TestNewPolicyDefaults(t *testing.T) {
	p, err := NewPolicy(nil)
	require.NoError(t, err)
	require.Equal(t, 3, p.Attempts())
	require.Equal(t, messages.BackoffExponential, p.Strategy())
	require.Equal(t, time.Second, p.InitialDelay())
	require.Equal(t, 30*time.Second, p.MaxDelay())
	require.Equal(t, messages.JitterMode(""), p.JitterMode())
	_, ok := p.Budget()
	require.False(t, ok)
	require.Equal(t, FailureAction{Action: messages.OnFailureStop}, p.OnFailure())
	require.Equal(t, "exponential base 2, initial 1s, max 30s, 3 attempts, no jitter", p.String())

	p, err = NewPolicy(&messages.RetryConfig{Jitter: true})
	require.NoError(t, err)
	require.Equal(t, messages.JitterProportional, p.JitterMode())
	require.Contains(t, p.String(), "jitter ±30%")

	p, err = NewPolicy(&messages.RetryConfig{JitterMode: messages.JitterFull})
	require.NoError(t, err)
	require.Equal(t, messages.JitterFull, p.JitterMode(), "jitter_mode enables jitter")
	require.Equal(t, messages.JitterMode(""), p.WithoutJitter().JitterMode())
}

func TestNewPolicyInvalid(t *testing.T) {
	tests := []struct {
		name   string
		cfg    *messages.RetryConfig
		fields []string
	}{
		{"attempts zero", &messages.RetryConfig{Attempts: ptr(0)}, []string{"attempts"}},
		{"attempts too many", &messages.RetryConfig{Attempts: ptr(messages.MaxAttempts + 1)}, []string{"attempts"}},
		{"negative initial", &messages.RetryConfig{InitialDelay: ptr(messages.Duration(-1))}, []string{"initial_delay"}},
		{"jitter factor", &messages.RetryConfig{JitterFactor: ptr(1.5)}, []string{"jitter_factor"}},
		{"jitter factor NaN", &messages.RetryConfig{JitterFactor: ptr(math.NaN())}, []string{"jitter_factor"}},
		{"jitter mode", &messages.RetryConfig{JitterMode: "wild"}, []string{"jitter_mode"}},
		{"base", &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 0.5}}, []string{"backoff.exponential.base"}},
		{"strategy", &messages.RetryConfig{Backoff: &messages.Backoff{Kind: "quadratic"}}, []string{"backoff"}},
		{"negative custom delay", &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffCustom, Delays: []messages.Duration{1e9, -1}}}, []string{"backoff.custom.delays[1]"}},
		{"regex", &messages.RetryConfig{RetryOn: []messages.Matcher{{Builtin: "network"}, {Pattern: "conn(refused"}}}, []string{"retry_on[1].pattern"}},
		{"builtin", &messages.RetryConfig{RetryOn: []messages.Matcher{{Builtin: "flaky"}}}, []string{"retry_on[0]"}},
		{"empty matcher", &messages.RetryConfig{RetryOn: []messages.Matcher{{}}}, []string{"retry_on[0]"}},
		{"fallback without command", &messages.RetryConfig{OnFailure: &messages.OnFailure{Action: messages.OnFailureFallback}}, []string{"on_failure"}},
		{"negative budget", &messages.RetryConfig{RetryBudget: ptr(messages.Duration(-1))}, []string{"retry_budget"}},
		{"zero budget", &messages.RetryConfig{RetryBudget: ptr(messages.Duration(0))}, []string{"retry_budget"}},
		{
			name:   "every problem at once",
			cfg:    &messages.RetryConfig{Attempts: ptr(-1), JitterMode: "x", RetryOn: []messages.Matcher{{Pattern: "("}}},
			fields: []string{"attempts", "jitter_mode", "retry_on[0].pattern"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
			var got []string
			for _, p := range ce.Problems {
				got = append(got, p.Field)
			}
			require.Equal(t, tt.fields, got)
		})
	}
}

func TestDelayJitterModes(t *testing.T) {
	base := func(mode messages.JitterMode) *Policy {
		p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(10), InitialDelay: dur("1s"), MaxDelay: dur("30s"),
			Jitter: true, JitterMode: mode, JitterFactor: ptr(0.5)})
		require.NoError(t, err)
		return p
	}
	tests := []struct {
		name string
		mode messages.JitterMode
		n    int
		prev time.Duration
		u    float64
		want time.Duration
	}{
		{"proportional low", messages.JitterProportional, 3, 0, 0, 2 * time.Second},   // 4s·(1−0.5)
		{"proportional mid", messages.JitterProportional, 3, 0, 0.5, 4 * time.Second}, // 4s
		{"proportional high", messages.JitterProportional, 3, 0, 1, 6 * time.Second},  // 4s·(1+0.5)
		{"proportional clamped at max", messages.JitterProportional, 6, 0, 1, 30 * time.Second},
		{"full low", messages.JitterFull, 3, 0, 0, 0},
		{"full quarter", messages.JitterFull, 3, 0, 0.25, time.Second},
		{"equal low", messages.JitterEqual, 3, 0, 0, 2 * time.Second},
		{"equal high", messages.JitterEqual, 3, 0, 1, 4 * time.Second},
		{"decorrelated first", messages.JitterDecorrelated, 1, 0, 1, 3 * time.Second},
		{"decorrelated low", messages.JitterDecorrelated, 5, 4 * time.Second, 0, time.Second},
		{"decorrelated high", messages.JitterDecorrelated, 5, 4 * time.Second, 1, 12 * time.Second},
		{"decorrelated capped", messages.JitterDecorrelated, 5, 20 * time.Second, 1, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, base(tt.mode).Delay(tt.n, tt.prev, fixedRand(tt.u)))
		})
	}
}

// Property: with any random input, jitter stays within its mode's bounds and
// never exceeds max_delay.
func TestJitterBoundsProperty(t *testing.T) {
	rnd := NewRand(42)
	strategies := []*messages.Backoff{
		{Kind: messages.BackoffExponential, Base: 2}, {Kind: messages.BackoffLinear}, {Kind: messages.BackoffFibonacci},
		{Kind: messages.BackoffFixed}, {Kind: messages.BackoffCustom, Delays: []messages.Duration{5e8, 7e9, 9e10}},
	}
	modes := []messages.JitterMode{messages.JitterProportional, messages.JitterFull, messages.JitterEqual, messages.JitterDecorrelated}
	for i := 0; i < 3000; i++ {
		initial := time.Duration(1 + rnd.Float64()*float64(5*time.Second))
		maxDelay := initial + time.Duration(rnd.Float64()*float64(time.Minute))
		factor := rnd.Float64()
		b := strategies[i%len(strategies)]
		mode := modes[(i/len(strategies))%len(modes)]
		p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(100), Backoff: b, InitialDelay: ptr(messages.Duration(initial)),
			MaxDelay: ptr(messages.Duration(maxDelay)), Jitter: true, JitterMode: mode, JitterFactor: &factor})
		require.NoError(t, err)
		n := 1 + int(rnd.Float64()*40)
		prev := time.Duration(rnd.Float64() * float64(2*maxDelay))
		d0 := p.BaseDelay(n)
		got := p.Delay(n, prev, rnd)
		var lo, hi float64
		switch mode {
		case messages.JitterProportional:
			lo, hi = float64(d0)*(1-factor), float64(d0)*(1+factor)
		case messages.JitterFull:
			lo, hi = 0, float64(d0)
		case messages.JitterEqual:
			lo, hi = float64(d0)/2, float64(d0)
		case messages.JitterDecorrelated:
			lo, hi = float64(initial), 3*float64(max(prev, initial))
		}
		lo, hi = math.Min(lo, float64(maxDelay)), math.Min(hi, float64(maxDelay))
		require.GreaterOrEqual(t, float64(got), math.Floor(lo)-1, "mode %s n %d", mode, n)
		require.LessOrEqual(t, float64(got), math.Ceil(hi)+1, "mode %s n %d", mode, n)
		require.LessOrEqual(t, got, maxDelay)
		require.GreaterOrEqual(t, got, time.Duration(0))
	}
}

// Property: without jitter, delays never decrease for exponential, linear and
// fibonacci, and never exceed max_delay.
func TestDelaysNonDecreasingProperty(t *testing.T) {
	rnd := NewRand(7)
	kinds := []messages.BackoffKind{messages.BackoffExponential, messages.BackoffLinear, messages.BackoffFibonacci}
	for i := 0; i < 300; i++ {
		initial := time.Duration(rnd.Float64() * float64(10*time.Second))
		maxDelay := initial + time.Duration(rnd.Float64()*float64(time.Hour))
		b := &messages.Backoff{Kind: kinds[i%3], Base: 1 + rnd.Float64()*4, Increment: ptr(messages.Duration(rnd.Float64() * float64(time.Minute)))}
		p, err := NewPolicy(&messages.RetryConfig{Backoff: b, InitialDelay: ptr(messages.Duration(initial)), MaxDelay: ptr(messages.Duration(maxDelay))})
		require.NoError(t, err)
		prev := time.Duration(0)
		for n := 1; n <= 200; n++ {
			d := p.Delay(n, prev, nil)
			require.GreaterOrEqual(t, d, prev, "%s n=%d", b.Kind, n)
			require.LessOrEqual(t, d, maxDelay)
			prev = d
		}
	}
}

// No overflow, no negative delay, at huge attempt numbers.
func TestDelayHugeAttempts(t *testing.T) {
	kinds := []messages.BackoffKind{messages.BackoffExponential, messages.BackoffLinear, messages.BackoffFibonacci, messages.BackoffFixed, messages.BackoffCustom}
	modes := []messages.JitterMode{"", messages.JitterProportional, messages.JitterFull, messages.JitterEqual, messages.JitterDecorrelated}
	maxes := []messages.Duration{messages.MustDuration("30s"), messages.Duration(math.MaxInt64), 0}
	inits := []messages.Duration{messages.MustDuration("1s"), 1, 0}
	for _, k := range kinds {
		for _, m := range modes {
			for _, mx := range maxes {
				for _, in := range inits {
					if in > mx {
						continue
					}
					p, err := NewPolicy(&messages.RetryConfig{Backoff: &messages.Backoff{Kind: k, Base: 10, Increment: ptr(messages.Duration(math.MaxInt64 / 2))},
						InitialDelay: ptr(in), MaxDelay: ptr(mx), JitterMode: m, JitterFactor: ptr(1.0)})
					require.NoError(t, err)
					for _, n := range []int{0, 1, 2, 93, 200, 10_000, math.MaxInt32, math.MaxInt} {
						for _, u := range []float64{0, 0.5, 0.999999} {
							d := p.Delay(n, time.Duration(mx), fixedRand(u))
							require.GreaterOrEqual(t, d, time.Duration(0), "%s %s max=%d init=%d n=%d", k, m, mx, in, n)
							require.LessOrEqual(t, d, mx.D())
						}
					}
					if m == "" && k != messages.BackoffFixed && in > 0 {
						require.Equal(t, mx.D(), p.Delay(10_000, 0, nil), "%s max=%d init=%d reaches the cap", k, mx, in)
					}
				}
			}
		}
	}
}

func TestNewRandDeterministic(t *testing.T) {
	a, b := NewRand(9), NewRand(9)
	for i := 0; i < 10; i++ {
		x := a.Float64()
		require.Equal(t, x, b.Float64())
		require.True(t, x >= 0 && x < 1)
	}
	require.Equal(t, 0.0, unit(fixedRand(-3)))
	require.Equal(t, 1.0, unit(fixedRand(7)))
	require.Equal(t, 0.0, unit(fixedRand(math.NaN())))
	u := unit(nil)
	require.True(t, u >= 0 && u <= 1)
}

// Every strategy is capped at max_delay, an initial delay above it
// included: `initial_delay: 1m` with the default max_delay retries every
// 30s (docs/contract.md §4), it is not refused.
func TestInitialDelayAboveMaxDelayIsCapped(t *testing.T) {
	for _, b := range []*messages.Backoff{
		nil, // exponential
		{Kind: messages.BackoffFixed},
		{Kind: messages.BackoffLinear},
		{Kind: messages.BackoffFibonacci},
		{Kind: messages.BackoffExponential, Base: 3},
		{Kind: messages.BackoffFibonacci, Initial: dur("1m")}, // legacy form
	} {
		name := "exponential"
		if b != nil {
			name = string(b.Kind)
		}
		t.Run(name, func(t *testing.T) {
			p, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(4), Backoff: b, InitialDelay: dur("1m")})
			require.NoError(t, err)
			require.Equal(t, secs(30, 30, 30), p.Plan(nil).Delays)
			jp, err := NewPolicy(&messages.RetryConfig{Attempts: ptr(4), Backoff: b, InitialDelay: dur("1m"), Jitter: true})
			require.NoError(t, err)
			for _, d := range jp.Plan(NewRand(7)).Delays {
				require.LessOrEqual(t, d, 30*time.Second, "jittered, still capped")
				require.GreaterOrEqual(t, d, 21*time.Second, "30s·(1-0.3)")
			}
		})
	}
	w, err := NewWorkflowPolicy(&messages.WorkflowRetryConfig{MaxAttempts: ptr(3), InitialDelay: dur("2m"), MaxDelay: dur("45s")})
	require.NoError(t, err)
	d, ok := w.Next(1, 0, nil)
	require.True(t, ok)
	require.Equal(t, 45*time.Second, d, "error_policy.retry_config is capped too")
}
