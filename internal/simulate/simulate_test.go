package simulate_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const ms = time.Millisecond

func parse(t testing.TB, doc string) *messages.JobSpec {
	t.Helper()
	spec, err := jobspec.Parse([]byte("items: [{id: a}]\n" + doc))
	require.NoError(t, err)
	return spec
}

func run(t testing.TB, cfg simulate.Config) *simulate.Result {
	t.Helper()
	r, err := simulate.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, r.Items, r.Succeeded+r.DeadLettered+r.Skipped+r.Failed+r.NotRun, "outcomes add up: %+v", r)
	require.Equal(t, int64(r.Budget.Consumed), r.Retries)
	require.LessOrEqual(t, r.Budget.Consumed, r.Budget.Total, "never over-granted")
	var sum, fails int64
	for i := range r.Series.Attempts {
		sum += r.Series.Attempts[i]
		fails += r.Series.Failures[i]
	}
	require.Equal(t, r.Attempts, sum, "the series holds every call")
	require.Equal(t, r.Failures, fails)
	return r
}

// outage is a dependency down from the start for an hour, failing every
// call in 100ms.
var outage = simulate.Dependency{StepDuration: 100 * ms, Outage: time.Hour, ErrorRate: 1}

const fixed1s = `
agent_template:
  - handler: call
    retry_config: {attempts: 3, backoff: fixed, initial_delay: 1s}
`

func TestNoOutageRunsEveryItemOnce(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s), Items: 10,
		Fleet:      simulate.Fleet{Concurrency: 2},
		Dependency: simulate.Dependency{StepDuration: 100 * ms},
	})
	require.Equal(t, int64(10), r.Attempts)
	require.Equal(t, int64(10), r.Succeeded)
	require.Equal(t, 500*ms, r.Duration, "10 items, 2 at a time, 100ms each")
	require.Equal(t, messages.StateSucceeded, r.State)
	require.Equal(t, messages.CompletionAllCompleted, r.Reason)
	require.Equal(t, 1.0, r.Amplification)
	require.Len(t, r.Phases, 1)
	require.Equal(t, []int64{10}, r.Series.Attempts)
}

// Each item fails at 0.1s, 1.2s and 2.3s (run 100ms, backoff 1s) and gives
// up after its 3 attempts: 2 retries each, all granted by a large budget.
func TestOutageSpendsEveryAttempt(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	require.Equal(t, int64(12), r.Attempts)
	require.Equal(t, int64(12), r.Failures)
	require.Equal(t, int64(8), r.Retries)
	require.Equal(t, int64(4), r.DeadLettered)
	require.Equal(t, map[string]int64{messages.ReasonAttempts: 4}, r.Reasons)
	require.Equal(t, 2300*ms, r.Duration)
	require.Equal(t, messages.StateFailed, r.State)
	require.Equal(t, []int64{4, 4, 4}, r.Series.Attempts)
	require.Equal(t, 3.0, r.Phases[1].Amplification, "3 calls per item during the outage")
}

// The job budget runs out in the second round: 4 granted at 0.1s, the 5th
// at 1.2s (exhausted then), the other three denied; the last item's third
// attempt gives up on attempts before it would claim.
func TestJobBudgetRunsOut(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 5\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	require.Equal(t, int64(9), r.Attempts)
	require.Equal(t, int64(5), r.Retries)
	require.True(t, r.Budget.Exhausted)
	require.Equal(t, 1200*ms, r.Budget.ExhaustedAt)
	require.Equal(t, map[string]int64{messages.ReasonJobBudget: 3}, r.Budget.Denied)
	require.Equal(t, map[string]int64{messages.ReasonJobBudget: 3, messages.ReasonAttempts: 1}, r.Reasons)
}

// The per-item cap is checked before the job budget.
func TestPerItemCapFirst(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\nretry_budget_per_item: 1\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	require.Equal(t, int64(8), r.Attempts)
	require.Equal(t, int64(4), r.Retries)
	require.Equal(t, map[string]int64{messages.ReasonItemBudget: 4}, r.Reasons)

	// retry_budget 0: no retries at all, every item denied by its cap of 0.
	r = run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 0\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	require.Equal(t, int64(4), r.Attempts)
	require.True(t, r.Budget.Exhausted)
	require.Zero(t, r.Budget.ExhaustedAt)
	require.Equal(t, map[string]int64{messages.ReasonItemBudget: 4}, r.Reasons)
}

// Items that fail during the outage and retry after it recover.
func TestItemsRecoverAfterTheOutage(t *testing.T) {
	dep := outage
	dep.Outage = 1500 * ms
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\n"), Items: 2,
		Fleet: simulate.Fleet{Concurrency: 2}, Dependency: dep,
	})
	require.Equal(t, int64(6), r.Attempts, "calls at 0s, 1.1s (in the outage) and 2.2s (after)")
	require.Equal(t, int64(4), r.Failures)
	require.Equal(t, int64(2), r.Recovered)
	require.Equal(t, int64(2), r.Succeeded)
	require.Equal(t, 2300*ms, r.Duration)
	require.Equal(t, []string{simulate.PhaseBefore, simulate.PhaseDuring, simulate.PhaseAfter},
		[]string{r.Phases[0].Name, r.Phases[1].Name, r.Phases[2].Name})
	require.Equal(t, int64(4), r.Phases[1].Attempts)
	require.Equal(t, int64(2), r.Phases[2].Attempts)
	require.Equal(t, 1.0, r.Phases[2].Amplification)
}

// max_parallel keeps items waiting out a backoff in the job's window: the
// third and fourth items start only when the first two have given up.
func TestMaxParallelHoldsBackoffs(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\nmax_parallel: 2\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 10}, Dependency: outage,
	})
	require.Equal(t, int64(12), r.Attempts)
	require.Equal(t, 4600*ms, r.Duration)
}

// Redeliveries that are due are served before new messages, but behind
// what an agent has already buffered (prefetch).
func TestRedeliveriesBeforeNewMessages(t *testing.T) {
	spec := parse(t, `
agent_template:
  - handler: call
    retry_config: {attempts: 3, backoff: fixed, initial_delay: 100ms}
`)
	dep := simulate.Dependency{StepDuration: time.Second, Outage: 500 * ms, ErrorRate: 1}
	// One slot, one buffered message: item 0 fails at 1s (its call was made
	// at 0, in the outage) and is due again at 1.1s, behind item 1 (running
	// from 1s) and item 2 (buffered at 1s). At 2s item 2 starts and item 0
	// takes the freed buffer place ahead of item 3; it runs 3s..4s.
	r := run(t, simulate.Config{
		Spec: spec, Items: 4, Fleet: simulate.Fleet{Concurrency: 1, Prefetch: 1}, Dependency: dep,
	})
	require.Equal(t, int64(5), r.Attempts)
	require.Equal(t, []int64{1, 1, 1, 1, 1}, r.Series.Attempts, "calls at 0, 1, 2, 3 (item 0 again), 4 (item 3)")
	require.Equal(t, 5*time.Second, r.Duration)
}

// Agents pull as pkg/agent does: a request for Prefetch messages, then,
// once it has had them all and the buffer is at most half full, one for
// what the buffer lacks; the server serves requests round-robin. With 2
// agents of 1 worker and Prefetch 2, each asks for 2 at the start and for
// 1 more when its worker takes its first: the 6 items split 3 and 3, and
// the job takes 3s.
func TestAgentsPullAhead(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s), Items: 6, Fleet: simulate.Fleet{Agents: 2, Concurrency: 1, Prefetch: 2},
		Dependency: simulate.Dependency{StepDuration: time.Second},
	})
	require.Equal(t, []int64{2, 2, 2}, r.Series.Attempts)
	require.Equal(t, 3*time.Second, r.Duration)
}

// A handler's retry.After delay replaces the backoff.
func TestRetryAfter(t *testing.T) {
	dep := outage
	dep.RetryAfter = 5 * time.Second
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\n"), Items: 1, Dependency: dep,
	})
	require.Equal(t, int64(3), r.Attempts)
	require.Equal(t, 10300*ms, r.Duration, "calls at 0, 5.1s, 10.2s")
	require.Equal(t, "429 Too Many Requests", simulate.Config{Dependency: dep}.WithDefaults().Dependency.Error)
}

// A slow dependency fails by the step's timeout, after the timeout.
func TestSlowDependencyTimesOut(t *testing.T) {
	spec := parse(t, `
agent_template:
  - handler: call
    timeout: 1s
    retry_config: {attempts: 2, backoff: fixed, initial_delay: 1s, retry_on: [timeout]}
retry_budget: 100
`)
	dep := simulate.Dependency{StepDuration: 100 * ms, Outage: time.Hour, Slow: 5 * time.Second}
	r := run(t, simulate.Config{Spec: spec, Items: 3, Fleet: simulate.Fleet{Concurrency: 3}, Dependency: dep})
	require.Equal(t, int64(6), r.Failures)
	require.Equal(t, 3*time.Second, r.Duration, "timed out at 1s, retried at 2s, timed out at 3s")
	require.Equal(t, map[string]int64{messages.ReasonAttempts: 3}, r.Reasons)

	// retry_on that does not match a timeout: no retry.
	spec = parse(t, `
agent_template:
  - handler: call
    timeout: 1s
    retry_config: {attempts: 2, retry_on: [network]}
`)
	r = run(t, simulate.Config{Spec: spec, Items: 3, Fleet: simulate.Fleet{Concurrency: 3}, Dependency: dep})
	require.Equal(t, int64(3), r.Attempts)
	require.Equal(t, map[string]int64{messages.ReasonNotRetryable: 3}, r.Reasons)
}

// A partial outage fails about that share of the calls; the draws are
// seeded, so a run is reproducible.
func TestPartialOutageIsSeeded(t *testing.T) {
	cfg := simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 100000\n"), Items: 20000,
		Fleet:      simulate.Fleet{Agents: 10, Concurrency: 10},
		Dependency: simulate.Dependency{StepDuration: 100 * ms, Outage: time.Hour, ErrorRate: 0.3}, Seed: 7,
	}
	r := run(t, cfg)
	require.InDelta(t, 0.3, float64(r.Failures)/float64(r.Attempts), 0.01)
	// Dead letters fail all 3 attempts: about 0.3³ of the items.
	require.InDelta(t, 0.027, float64(r.DeadLettered)/float64(r.Items), 0.005)
	again := run(t, cfg)
	require.Equal(t, r, again)
	cfg.Seed = 8
	require.NotEqual(t, r.Failures, run(t, cfg).Failures)
}

// A recovery ramp fails fewer and fewer calls after the outage.
func TestRecoveryRamp(t *testing.T) {
	cfg := simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000000\n"), Items: 100000,
		Fleet:      simulate.Fleet{Agents: 10, Concurrency: 10},
		Dependency: simulate.Dependency{StepDuration: 100 * ms, OutageAt: 10 * time.Second, Outage: 10 * time.Second, Ramp: 40 * time.Second, ErrorRate: 1},
	}
	r := run(t, cfg)
	rate := func(from, to int) float64 {
		var a, f int64
		for i := from; i < to; i++ {
			a += r.Series.Attempts[i]
			f += r.Series.Failures[i]
		}
		return float64(f) / float64(a)
	}
	require.Zero(t, rate(0, 10))
	require.Equal(t, 1.0, rate(10, 20))
	require.InDelta(t, 0.875, rate(20, 30), 0.03, "a quarter into the ramp")
	require.InDelta(t, 0.125, rate(50, 60), 0.03, "the last quarter")
	require.Zero(t, rate(60, len(r.Series.Attempts)))
}

const breakerSpec = `
agent_template:
  - handler: call
    retry_config: {attempts: 10, backoff: fixed, initial_delay: 1s}
retry_budget: 1000
error_policy:
  circuit_breaker: {failure_threshold: 2, success_threshold: 1, timeout: 10s, half_open_requests: 1}
`

// The breaker opens after two failures; parked deliveries spend no attempt
// and no budget; after the timeout one probe goes through, and closes it
// once the dependency is back.
func TestBreakerParksAndProbes(t *testing.T) {
	dep := outage
	dep.Outage = 15 * time.Second
	r := run(t, simulate.Config{
		Spec: parse(t, breakerSpec), Items: 4, Fleet: simulate.Fleet{Concurrency: 4}, Dependency: dep,
	})
	require.NotNil(t, r.Breaker)
	tr := r.Breaker.Transitions
	require.GreaterOrEqual(t, len(tr), 4)
	require.Equal(t, simulate.Transition{At: 100 * ms, From: "closed", To: "open"}, tr[0])
	require.Equal(t, "open>half_open", tr[1].From+">"+tr[1].To)
	// Parked at 1.1s until opened_at + timeout = 10.1s, spread by up to a
	// quarter of the 9s: the first delivery back half-opens it.
	require.GreaterOrEqual(t, tr[1].At, 10100*ms)
	require.LessOrEqual(t, tr[1].At, 12350*ms)
	require.Equal(t, "half_open>open", tr[2].From+">"+tr[2].To, "the probe fails: the outage lasts 15s")
	last := tr[len(tr)-1]
	require.Equal(t, "half_open>closed", last.From+">"+last.To)
	require.Positive(t, r.Parked)
	require.Equal(t, int64(4), r.Succeeded)
	require.Equal(t, r.Failures, r.Retries, "every failure retried; parking spent nothing")
	require.Less(t, r.Attempts, int64(4*10), "parked instead of hammering the dependency")
	require.Equal(t, 2, r.Breaker.Opened)
}

// MaxDeliver bounds deliveries, parks included: the last delivery runs
// despite the breaker, and a failure then gives up (max_deliveries).
func TestMaxDeliverBackstop(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, breakerSpec), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4, MaxDeliver: 3}, Dependency: outage,
	})
	require.Equal(t, int64(4), r.DeadLettered)
	require.Equal(t, map[string]int64{messages.ReasonMaxDeliveries: 4}, r.Reasons)
	require.Equal(t, int64(12), r.Deliveries)
}

// A short retry runs again on its agent and spends no delivery, as the
// agent's local retries do: three in a row, then a delayed nak. With
// MaxDeliver 3 an always-failing item runs 4 times on each of its first
// two deliveries and once on the last (e2e's TestLastDeliveryGivesUp sees
// the same on a real fleet); without local retries, once per delivery.
func TestShortRetriesStayOnTheirAgent(t *testing.T) {
	spec := parse(t, `
agent_template:
  - handler: call
    retry_config: {attempts: 20, backoff: fixed, initial_delay: 10ms}
retry_budget: 1000
`)
	cfg := simulate.Config{Spec: spec, Items: 2, Fleet: simulate.Fleet{Concurrency: 2, MaxDeliver: 3}, Dependency: outage}
	r := run(t, cfg)
	require.Equal(t, int64(2*(4+4+1)), r.Attempts)
	require.Equal(t, int64(2*(3+1+3+1)), r.Retries)
	require.Equal(t, int64(2*3), r.Deliveries)
	require.Equal(t, map[string]int64{messages.ReasonMaxDeliveries: 2}, r.Reasons)

	cfg.Fleet.LocalRetryMax = -1
	r = run(t, cfg)
	require.Equal(t, int64(2*3), r.Attempts)
	require.Equal(t, int64(2*2), r.Retries)
	require.Equal(t, int64(2*3), r.Deliveries)
}

func TestErrorPolicies(t *testing.T) {
	base := `
agent_template:
  - handler: call
    retry_config: {attempts: 2, backoff: fixed, initial_delay: 1s}
retry_budget: 1000
`
	cfg := func(doc string, items int64) simulate.Config {
		return simulate.Config{Spec: parse(t, base+doc), Items: items, Fleet: simulate.Fleet{Concurrency: 2}, Dependency: outage}
	}
	t.Run("skip", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: skip}\n", 2))
		require.Equal(t, int64(2), r.Skipped)
		require.Zero(t, r.DeadLettered)
	})
	t.Run("custom", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: {custom: {shell: 'echo saved'}}}\n", 2))
		require.Equal(t, int64(2), r.Failed)
	})
	t.Run("retry the whole item, each run claiming a unit", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: retry, retry_config: {max_attempts: 3, backoff: fixed, initial_delay: 2s}}\n", 1))
		require.Equal(t, int64(6), r.Attempts, "3 whole-item runs of 2 attempts")
		require.Equal(t, int64(5), r.Retries, "3 step retries + 2 item retries")
		require.Equal(t, map[string]int64{messages.ReasonItemRetryExhausted: 1}, r.Reasons)
		require.Equal(t, 7600*ms, r.Duration, "fails at 0.1, 1.2; run 2 at 3.2: 3.3, 4.4; run 3 at 6.4: 6.5, 7.6")
	})
	t.Run("dlq with a retry_config: the whole item again, then the DLQ", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: dlq, retry_config: {max_attempts: 3, backoff: fixed, initial_delay: 2s}}\n", 1))
		require.Equal(t, int64(6), r.Attempts, "3 whole-item runs of 2 attempts, as under retry")
		require.Equal(t, int64(5), r.Retries)
		require.Equal(t, map[string]int64{messages.ReasonItemRetryExhausted: 1}, r.Reasons)
		require.Equal(t, int64(1), r.DeadLettered)
	})
	t.Run("skip leaves a retry_config unused", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: skip, retry_config: {max_attempts: 3}}\n", 1))
		require.Equal(t, int64(2), r.Attempts)
		require.Equal(t, int64(1), r.Skipped)
	})
	t.Run("max_failures stops the job", func(t *testing.T) {
		r := run(t, cfg("error_policy: {max_failures: 2}\n", 10))
		require.Equal(t, messages.StateStopped, r.State)
		require.Equal(t, messages.CompletionMaxFailures, r.Reason)
		require.Equal(t, int64(2), r.DeadLettered)
		require.Equal(t, int64(8), r.NotRun)
	})
	t.Run("on_item_failure stop", func(t *testing.T) {
		r := run(t, cfg("error_policy: {on_item_failure: stop}\n", 10))
		require.Equal(t, messages.CompletionItemStop, r.Reason)
		require.Equal(t, int64(1), r.DeadLettered, "the items stop with the first; the second's result comes late")
	})
	t.Run("on_failure continue", func(t *testing.T) {
		spec := parse(t, `
agent_template:
  - handler: call
    retry_config: {attempts: 1, on_failure: continue}
  - shell: "true"
`)
		r := run(t, simulate.Config{Spec: spec, Items: 3, Fleet: simulate.Fleet{Concurrency: 3}, Dependency: outage})
		require.Equal(t, int64(3), r.Succeeded)
		require.Equal(t, int64(3), r.Recovered)
		require.Equal(t, 200*ms, r.Duration)
	})
	t.Run("best-effort deadline", func(t *testing.T) {
		r := run(t, cfg("best_effort: {deadline: 5s}\n", 100))
		require.Equal(t, messages.CompletionDeadline, r.Reason)
		require.Equal(t, 5*time.Second, r.Duration)
		require.Positive(t, r.NotRun)
	})
}

// MaxAckPending stops new deliveries while messages wait out their
// backoff: with 2 pending allowed, items 2 and 3 start after 0 and 1 end.
func TestMaxAckPending(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 1000\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 10, MaxAckPending: 2}, Dependency: outage,
	})
	require.Equal(t, 4600*ms, r.Duration)
}

func TestShellStepFailures(t *testing.T) {
	spec := parse(t, `
agent_template:
  - shell: "curl -f https://api"
    retry_config: {attempts: 3, backoff: fixed, initial_delay: 1s, retry_on: [{exit_code: [22]}]}
`)
	cfg := simulate.Config{Spec: spec, Items: 2, Fleet: simulate.Fleet{Concurrency: 2}, Dependency: outage}
	require.Equal(t, map[string]int64{messages.ReasonNotRetryable: 2}, run(t, cfg).Reasons, "exit status 1 by default")
	cfg.Dependency.ExitCode = 22
	require.Equal(t, int64(6), run(t, cfg).Attempts)
}

func TestValidate(t *testing.T) {
	spec := parse(t, `
agent_template:
  - shell: "true"
`)
	_, err := simulate.Run(context.Background(), simulate.Config{
		Spec: spec, Items: -1,
		Fleet:      simulate.Fleet{Agents: -2, MaxDeliver: -5},
		Dependency: simulate.Dependency{Step: 3, ErrorRate: 1.5, StepDuration: -time.Second, RetryAfter: time.Second},
	})
	var ve *messages.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, simulate.KindSimulation, ve.Kind)
	var fields []string
	for _, p := range ve.Problems {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{"items", "fleet.agents", "fleet.max_deliver", "dependency.step",
		"dependency.step_duration", "dependency.error_rate"}, fields)

	_, err = simulate.Run(context.Background(), simulate.Config{Spec: spec, Items: 1, Dependency: simulate.Dependency{RetryAfter: time.Second}})
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "dependency.retry_after", ve.Problems[0].Field)

	_, err = simulate.Run(context.Background(), simulate.Config{Items: 1})
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "spec", ve.Problems[0].Field)

	_, err = simulate.Run(context.Background(), simulate.Config{Spec: spec, Items: 1, Budget: budget.Settings{Max: budget.Count(-1)}})
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "budget", ve.Problems[0].Field)
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := simulate.Run(ctx, simulate.Config{Spec: parse(t, fixed1s), Items: 1})
	require.True(t, errors.Is(err, context.Canceled))
}

func TestHorizonTruncates(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s), Items: 100, Dependency: simulate.Dependency{StepDuration: time.Second},
		Horizon: 10 * time.Second,
	})
	require.True(t, r.Truncated)
	require.Equal(t, simulate.ReasonHorizon, r.Reason)
	require.Equal(t, int64(80), r.Succeeded, "8 slots, 10 rounds")
	require.Equal(t, int64(20), r.NotRun)
}

// A run that would go on for too long stops at MaxEvents: MaxDeliver -1
// and a breaker parking items through a month-long outage.
func TestMaxEventsTruncates(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, breakerSpec), Items: 100, Fleet: simulate.Fleet{MaxDeliver: -1},
		Dependency: simulate.Dependency{StepDuration: 100 * ms, Outage: 30 * 24 * time.Hour, ErrorRate: 1},
		MaxEvents:  10000,
	})
	require.True(t, r.Truncated)
	require.Equal(t, simulate.ReasonMaxEvents, r.Reason)
	require.Positive(t, r.Parked)
}

func TestResultJSON(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, fixed1s+"retry_budget: 5\n"), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.EqualValues(t, 9, got["attempts"])
	require.EqualValues(t, 5, got["retries"])
	require.EqualValues(t, 4, got["dead_lettered"])
	require.EqualValues(t, 2300, got["duration_ms"])
	bud := got["budget"].(map[string]any)
	require.EqualValues(t, 1200, bud["exhausted_at_ms"])
	require.EqualValues(t, 5, bud["consumed"])
	ser := got["series"].(map[string]any)
	require.EqualValues(t, 1000, ser["bucket_ms"])
	require.Equal(t, []any{4.0, 4.0, 1.0}, ser["attempts"])
}

// Runs share nothing: one Config (and its spec) may serve concurrent runs,
// and each gives the same result (run with -race).
func TestConcurrentRunsShareTheConfig(t *testing.T) {
	cfg := simulate.Config{
		Spec: parse(t, breakerSpec), Items: 2000, Fleet: simulate.Fleet{Agents: 2, Concurrency: 8},
		Dependency: simulate.Dependency{StepDuration: 100 * ms, OutageAt: time.Second, Outage: 20 * time.Second, ErrorRate: 0.5},
		Seed:       3,
	}
	want := run(t, cfg)
	results := make([]*simulate.Result, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = run(t, cfg) })
	}
	wg.Wait()
	for _, r := range results {
		require.Equal(t, want, r)
	}
}

// agent_timeout as the agent applies it: each item fails at 0.1s, 1.2s,
// 2.3s (run 100ms, fixed 1s); its next retry would come back at 3.3s, past
// its 3s agent_timeout, so it fails with agent_timeout after 3 runs (its 10
// attempts and its step budget allowed more). The item's retry_budget (60s)
// plays no part: run time is not counted there.
func TestAgentTimeoutEndsTheItems(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, `
agent_timeout: 3s
agent_template:
  - handler: call
    retry_config: {attempts: 10, backoff: fixed, initial_delay: 1s, retry_budget: 60s}
retry_budget: 1000
`), Items: 4,
		Fleet: simulate.Fleet{Concurrency: 4}, Dependency: outage,
	})
	require.Equal(t, int64(12), r.Attempts)
	require.Equal(t, int64(8), r.Retries)
	require.Equal(t, map[string]int64{messages.ReasonAgentTimeout: 4}, r.Reasons)
	require.Equal(t, 2300*ms, r.Duration)

	// A hung dependency: every call would take a minute; the item's second
	// run is cut at the 3s deadline.
	slow := outage
	slow.Slow = time.Minute
	r = run(t, simulate.Config{
		Spec: parse(t, "agent_timeout: 3s\nagent_template: [{handler: call, retry_config: {attempts: 10, backoff: fixed, initial_delay: 1s}}]\n"), Items: 1,
		Dependency: slow,
	})
	require.Equal(t, int64(1), r.Attempts, "the first run is cut at 3s, and nothing is left")
	require.Equal(t, map[string]int64{messages.ReasonAgentTimeout: 1}, r.Reasons)
	require.Equal(t, 3*time.Second, r.Duration)
}

// A step's own circuit breaker on the dependency step: after 3 failures
// every run of the step fails fast, without calling the dependency; with
// on_failure: continue the items go on and succeed.
func TestStepBreakerFailsFast(t *testing.T) {
	r := run(t, simulate.Config{
		Spec: parse(t, `
agent_template:
  - handler: call
    retry_config: {attempts: 1, on_failure: continue, circuit_breaker: {failure_threshold: 3, timeout: 1h}}
`), Items: 100,
		Fleet: simulate.Fleet{Concurrency: 1}, Dependency: outage,
	})
	require.Equal(t, int64(3), r.Attempts, "one agent, one item at a time: exactly the threshold")
	require.Equal(t, int64(97), r.FailedFast)
	require.Equal(t, int64(100), r.Succeeded)
}

// LimitedOutage is the fleet's adaptive outage run (internal/e2e
// TestLimitAdaptiveOutage) as a simulation: 1,200 items on two agents of
// 16 slots call a dependency answering in 5 ms through an adaptive limit
// of 40/s, burst 10; it answers 503 from 4 s to 16 s.
func limitedOutage(t testing.TB) simulate.Config {
	return simulate.Config{
		Spec: parse(t, `
retry_budget: 100000
agent_template:
  - handler: http
    limit: flaky
    retry_config: {attempts: 40, backoff: fixed, initial_delay: 200ms, jitter: true}
`), Items: 1200,
		Fleet:      simulate.Fleet{Agents: 2, Concurrency: 16, MaxDeliver: 50},
		Dependency: simulate.Dependency{StepDuration: 5 * ms, OutageAt: 4 * time.Second, Outage: 12 * time.Second, ErrorRate: 1},
		Limit:      messages.LimitConfig{Rate: 40, Burst: 10, Adaptive: true},
		Seed:       1,
	}
}

// A limit caps the calls at its rate; an adaptive one falls to a quarter
// of it within 3 s of an outage's start and comes back to 80 % of it
// within 15 s of its end.
func TestLimitedOutage(t *testing.T) {
	r := run(t, limitedOutage(t))
	rate := func(from, to int) float64 { // calls per second in [from, to) seconds
		var n int64
		for i := from; i < to && i < len(r.Series.Attempts); i++ {
			n += r.Series.Attempts[i]
		}
		return float64(n) / float64(to-from)
	}
	healthy, during := rate(1, 4), rate(7, 16)
	recovered := -1
	for i := 16; i < 31 && i < len(r.Series.Attempts); i++ {
		if r.Series.Rate(i) >= 0.8*healthy {
			recovered = i - 16
			break
		}
	}
	t.Logf("healthy %.1f/s, outage after 3 s %.1f/s, 80%% again in second %d after it; %d limit waits, %d calls, done in %s",
		healthy, during, recovered, r.LimitWaits, r.Attempts, r.Duration)
	require.InDelta(t, 40, healthy, 4, "the limit's rate binds")
	for i := range r.Series.Attempts {
		require.LessOrEqual(t, r.Series.Attempts[i], int64(50), "second %d: at most rate + burst", i)
	}
	require.LessOrEqual(t, during, 0.25*healthy)
	require.GreaterOrEqual(t, recovered, 0)
	require.Positive(t, r.LimitWaits, "items waited outside their agents")
	require.Equal(t, int64(1200), r.Succeeded)
}

// The variant key "limit" gives the dependency step an inline limit (or
// takes it away with null), so --compare shows what a limit does.
func TestLimitVariant(t *testing.T) {
	cfg := limitedOutage(t)
	v, err := simulate.ParseVariant("limit=null")
	require.NoError(t, err)
	none, err := v.Apply(cfg)
	require.NoError(t, err)
	require.Nil(t, none.Spec.AgentTemplate[0].Limit)
	r := run(t, none)
	require.Greater(t, r.Series.Attempts[0], int64(1000), "no limit: the items start at once")

	v, err = simulate.ParseVariant("limit={key: api, rate: 20/s, burst: 5}")
	require.NoError(t, err)
	limited, err := v.Apply(none)
	require.NoError(t, err)
	r = run(t, limited)
	for i, n := range r.Series.Attempts {
		require.LessOrEqual(t, n, int64(25), "second %d: at most rate + burst", i)
	}
	require.Positive(t, r.LimitWaits)
}
