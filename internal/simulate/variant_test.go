package simulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const fullSpec = `
id: v
name: every field a variant may touch
max_parallel: 20
agent_template:
  - shell: "prep ${item.id}"
  - handler: call
    timeout: 5s
    with: {bucket: photos}
    retry_config:
      attempts: 5
      backoff: {exponential: {base: 3}}
      initial_delay: 500ms
      max_delay: 20s
      jitter: true
      jitter_factor: 0.2
      retry_on: [network, {pattern: "(?i)unavailable"}, {exit_code: [75]}]
      retry_budget: 1m
      on_failure: {fallback: {command: "save ${item.id}"}}
error_policy:
  on_item_failure: dlq
  max_failures: 100
  circuit_breaker: {failure_threshold: 5, timeout: 30s}
retry_budget: "10%"
retry_budget_per_item: 3
best_effort: {deadline: 10m}
`

func TestVariantRoundTripKeepsTheSpec(t *testing.T) {
	spec := parse(t, fullSpec)
	v, err := simulate.ParseVariant("max_parallel=20")
	require.NoError(t, err)
	cfg, err := v.Apply(simulate.Config{Spec: spec, Dependency: simulate.Dependency{Step: 1}})
	require.NoError(t, err)
	require.Equal(t, spec, cfg.Spec, "a no-op override gives the same spec back")
}

func TestVariantOverrides(t *testing.T) {
	spec := parse(t, fullSpec)
	base := simulate.Config{Spec: spec, Dependency: simulate.Dependency{Step: 1}, Fleet: simulate.Fleet{Agents: 2}}
	apply := func(s string) simulate.Config {
		t.Helper()
		v, err := simulate.ParseVariant(s)
		require.NoError(t, err)
		cfg, err := v.Apply(base)
		require.NoError(t, err)
		return cfg
	}
	step := func(c simulate.Config) *messages.RetryConfig { return c.Spec.AgentTemplate[1].RetryConfig }

	c := apply("retry_budget=5%; retry_budget_per_item=null")
	require.Equal(t, &messages.BudgetValue{Percent: 5, IsPercent: true}, c.Spec.RetryBudget)
	require.Nil(t, c.Spec.RetryBudgetPerItem)
	require.Equal(t, "10%", spec.RetryBudget.String(), "the original spec is not changed")

	c = apply("jitter=full")
	require.True(t, step(c).Jitter)
	require.Equal(t, messages.JitterFull, step(c).JitterMode)
	c = apply("jitter=none")
	require.False(t, step(c).Jitter)
	require.Empty(t, step(c).JitterMode)

	c = apply("attempts=3; backoff=fixed; initial_delay=2s; timeout=1s")
	require.Equal(t, 3, *step(c).Attempts)
	require.Equal(t, messages.BackoffFixed, step(c).Backoff.Kind)
	require.Equal(t, messages.MustDuration("2s"), *step(c).InitialDelay)
	require.Equal(t, messages.MustDuration("1s"), c.Spec.AgentTemplate[1].Timeout)

	c = apply("circuit_breaker=off")
	require.Nil(t, c.Spec.ErrorPolicy.CircuitBreaker)
	c = apply("circuit_breaker={failure_threshold: 2, timeout: 5s}")
	require.Equal(t, 2, c.Spec.ErrorPolicy.CircuitBreaker.FailureThreshold)
	c = apply("error_policy.circuit_breaker.timeout=10s")
	require.Equal(t, messages.MustDuration("10s"), c.Spec.ErrorPolicy.CircuitBreaker.Timeout)
	require.Equal(t, 5, c.Spec.ErrorPolicy.CircuitBreaker.FailureThreshold, "the rest of the object is kept")

	c = apply("agents=8; concurrency=4")
	require.Equal(t, simulate.Fleet{Agents: 8, Concurrency: 4}, c.Fleet)
	require.Same(t, spec, c.Spec, "a fleet-only variant keeps the spec")

	v, err := simulate.ParseVariant("name=breaker; circuit_breaker={failure_threshold: 20}")
	require.NoError(t, err)
	require.Equal(t, "breaker", v.Name)
	require.Len(t, v.Overrides, 1)
	v, err = simulate.ParseVariant(" jitter=full ")
	require.NoError(t, err)
	require.Equal(t, "jitter=full", v.Name, "by default, as written")

	c = apply("agent_template[0].retry_config={attempts: 2}")
	require.Equal(t, 2, *c.Spec.AgentTemplate[0].RetryConfig.Attempts)
}

func TestVariantErrors(t *testing.T) {
	spec := parse(t, fullSpec)
	base := simulate.Config{Spec: spec, Dependency: simulate.Dependency{Step: 1}}
	for _, s := range []string{"", "retry_budget", "=3", "nope=1", "retry_budget=5%; ;bogus=2", "name=x", "name=; jitter=full"} {
		_, err := simulate.ParseVariant(s)
		require.ErrorIs(t, err, simulate.ErrVariant, s)
	}
	tests := []struct {
		variant, field string
	}{
		{"jitter=fulll", "agent_template[1].retry_config.jitter_mode"},
		{"retry_budget=-3", "retry_budget"},
		{"attempts=0", "agent_template[1].retry_config.attempts"},
		{"error_policy.circuit_breaker.timeout=soon", "error_policy.circuit_breaker.timeout"},
	}
	for _, tt := range tests {
		v, err := simulate.ParseVariant(tt.variant)
		require.NoError(t, err)
		_, err = v.Apply(base)
		var ve *messages.ValidationError
		require.ErrorAs(t, err, &ve, tt.variant)
		require.Equal(t, tt.field, ve.Problems[0].Field, tt.variant)
		require.Zero(t, ve.Problems[0].Line)
	}
	for _, s := range []string{"agents=many", "agent_template[7].timeout=1s", "retry_budget={a: [}"} {
		v, err := simulate.ParseVariant(s)
		require.NoError(t, err)
		_, err = v.Apply(base)
		require.ErrorIs(t, err, simulate.ErrVariant, s)
	}
	require.NotEmpty(t, simulate.VariantKeys())
}
