package retry

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func newWorkflow(t *testing.T, ep *messages.ErrorPolicy) *Workflow {
	t.Helper()
	w, err := NewWorkflow(ep)
	require.NoError(t, err)
	return w
}

func TestWorkflowStopsAtExactlyMaxFailures(t *testing.T) {
	w := newWorkflow(t, &messages.ErrorPolicy{MaxFailures: ptr(3)})
	var c Counts
	for i := 1; i <= 3; i++ {
		v := w.OnItemFailure(ItemFailure{Run: 1}, c, nil)
		require.Equal(t, messages.ItemFailureDLQ, v.Action)
		require.True(t, v.Final)
		if i < 3 {
			require.False(t, v.StopJob, "failure %d", i)
		} else {
			require.True(t, v.StopJob, "failure %d", i)
			require.Equal(t, messages.CompletionMaxFailures, v.StopReason)
		}
		c.Finished++
		c.Failed++
	}
}

func TestWorkflowThresholdNeedsTenFinished(t *testing.T) {
	w := newWorkflow(t, &messages.ErrorPolicy{FailureThreshold: ptr(0.25)})
	tests := []struct {
		name     string
		c        Counts
		stop     bool
		wantWhy  string
		onFailOK bool
	}{
		{"9 finished, all failed", Counts{Finished: 9, Failed: 9}, false, "", true},
		{"10 finished, 3 failed (0.3)", Counts{Finished: 10, Failed: 3}, true, messages.CompletionFailureThreshold, true},
		{"10 finished, 2 failed (0.2)", Counts{Finished: 10, Failed: 2}, false, "", true},
		{"20 finished, 5 failed (0.25, not above)", Counts{Finished: 20, Failed: 5}, false, "", true},
		{"no failures", Counts{Finished: 100}, false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop, why := w.Check(tt.c)
			require.Equal(t, tt.stop, stop)
			require.Equal(t, tt.wantWhy, why)
		})
	}
	// Through OnItemFailure: counts before the failure, which is added.
	v := w.OnItemFailure(ItemFailure{}, Counts{Finished: 8, Failed: 8}, nil)
	require.False(t, v.StopJob, "9 finished")
	v = w.OnItemFailure(ItemFailure{}, Counts{Finished: 9, Failed: 2}, nil)
	require.True(t, v.StopJob, "10 finished, 3 failed")
	require.Equal(t, messages.CompletionFailureThreshold, v.StopReason)
	require.Equal(t, messages.ItemFailureDLQ, v.Action, "the tripping item still reaches the DLQ")
}

var dlqRetry3 = &messages.ErrorPolicy{
	OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureDLQ},
	RetryConfig:   &messages.WorkflowRetryConfig{MaxAttempts: ptr(3), Backoff: &messages.Backoff{Kind: messages.BackoffExponential}},
}

func TestWorkflowActions(t *testing.T) {
	custom := &messages.Step{Handler: "notify"}
	tests := []struct {
		name string
		ep   *messages.ErrorPolicy
		f    ItemFailure
		c    Counts
		want Verdict
	}{
		{"defaults: dlq, continue", nil, ItemFailure{Run: 1}, Counts{Finished: 50, Failed: 40},
			Verdict{Action: messages.ItemFailureDLQ, Final: true}},
		{"continue_on_failure false stops at the first failure", &messages.ErrorPolicy{ContinueOnFailure: ptr(false)}, ItemFailure{Run: 1}, Counts{Finished: 5},
			Verdict{Action: messages.ItemFailureDLQ, Final: true, StopJob: true, StopReason: messages.CompletionFirstFailure}},
		{"skip", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureSkip}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureSkip, Final: true}},
		{"stop", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureStop}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureStop, Final: true, StopJob: true, StopReason: messages.CompletionItemStop}},
		{"custom", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureCustom, Custom: custom}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureCustom, Custom: custom, Final: true}},
		{"retry: first run", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureRetry}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureRetry, Delay: time.Second}},
		{"retry: second run", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureRetry}}, ItemFailure{Run: 2}, Counts{},
			Verdict{Action: messages.ItemFailureRetry, Delay: 2 * time.Second}},
		{"retry: exhausted goes to the DLQ", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureRetry}, MaxFailures: ptr(1)}, ItemFailure{Run: 3}, Counts{},
			Verdict{Action: messages.ItemFailureDLQ, Reason: messages.ReasonItemRetryExhausted, Final: true, StopJob: true, StopReason: messages.CompletionMaxFailures}},
		{"retry: permanent error is not re-run", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureRetry}}, ItemFailure{Run: 1, Err: fmt.Errorf("x: %w", Permanent(errors.New("bad input")))}, Counts{},
			Verdict{Action: messages.ItemFailureDLQ, Reason: messages.ReasonItemRetryExhausted, Final: true}},
		// 003's configuration: on_item_failure: dlq with a workflow-level
		// retry_config (max_attempts: 3, exponential) re-runs the item,
		// then dead-letters it.
		{"dlq with retry_config: first run is re-run", dlqRetry3, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureRetry, Delay: time.Second}},
		{"dlq with retry_config: second run is re-run", dlqRetry3, ItemFailure{Run: 2, LastDelay: time.Second}, Counts{},
			Verdict{Action: messages.ItemFailureRetry, Delay: 2 * time.Second}},
		{"dlq with retry_config: third run is dead-lettered", dlqRetry3, ItemFailure{Run: 3}, Counts{},
			Verdict{Action: messages.ItemFailureDLQ, Reason: messages.ReasonItemRetryExhausted, Final: true}},
		{"default dlq with retry_config", &messages.ErrorPolicy{RetryConfig: &messages.WorkflowRetryConfig{MaxAttempts: ptr(2)}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureRetry, Delay: time.Second}},
		{"skip ignores retry_config", &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureSkip}, RetryConfig: &messages.WorkflowRetryConfig{MaxAttempts: ptr(3)}}, ItemFailure{Run: 1}, Counts{},
			Verdict{Action: messages.ItemFailureSkip, Final: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorkflow(t, tt.ep)
			require.Equal(t, tt.want, w.OnItemFailure(tt.f, tt.c, fixedRand(0.5)))
		})
	}
}

func TestWorkflowPolicyLegacyForms(t *testing.T) {
	tests := []struct {
		name string
		cfg  *messages.WorkflowRetryConfig
		want []time.Duration
	}{
		{"defaults", nil, secs(1, 2)},
		{"exponential initial + multiplier", &messages.WorkflowRetryConfig{MaxAttempts: ptr(5),
			Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Initial: dur("2s"), Base: 3}, MaxDelay: dur("1m")}, secs(2, 6, 18, 54)},
		{"fixed delay", &messages.WorkflowRetryConfig{MaxAttempts: ptr(4), Backoff: &messages.Backoff{Kind: messages.BackoffFixed, Initial: dur("5s")}}, secs(5, 5, 5)},
		{"fibonacci initial", &messages.WorkflowRetryConfig{MaxAttempts: ptr(6), Backoff: &messages.Backoff{Kind: messages.BackoffFibonacci, Initial: dur("1s")}}, secs(1, 1, 2, 3, 5)},
		{"linear", &messages.WorkflowRetryConfig{MaxAttempts: ptr(4), Backoff: &messages.Backoff{Kind: messages.BackoffLinear, Initial: dur("1s"), Increment: dur("2s")}}, secs(1, 3, 5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wp, err := NewWorkflowPolicy(tt.cfg)
			require.NoError(t, err)
			var got []time.Duration
			prev := time.Duration(0)
			for run := 1; ; run++ {
				d, ok := wp.Next(run, prev, nil)
				if !ok {
					require.Equal(t, wp.MaxAttempts(), run)
					break
				}
				got = append(got, d)
				prev = d
			}
			require.Equal(t, tt.want, got)
		})
	}
	_, err := NewWorkflowPolicy(&messages.WorkflowRetryConfig{MaxAttempts: ptr(0)})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "max_attempts", ce.Problems[0].Field)
}

func TestNewWorkflowInvalid(t *testing.T) {
	_, err := NewWorkflow(&messages.ErrorPolicy{
		OnItemFailure:    &messages.ItemFailureAction{Action: "explode"},
		MaxFailures:      ptr(0),
		FailureThreshold: ptr(1.5),
		ErrorCollection:  &messages.ErrorCollection{Mode: messages.CollectBatched},
		CircuitBreaker:   &messages.CircuitBreakerConfig{HalfOpenRequests: -1},
		RetryConfig:      &messages.WorkflowRetryConfig{MaxAttempts: ptr(-2)},
	})
	require.ErrorIs(t, err, ErrInvalidConfig)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	var fields []string
	for _, p := range ce.Problems {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{"on_item_failure", "max_failures", "failure_threshold", "error_collection.batched.size",
		"circuit_breaker.half_open_requests", "retry_config.max_attempts"}, fields)

	_, err = NewWorkflow(&messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureCustom}})
	require.ErrorContains(t, err, "on_item_failure.custom")
}

func TestWorkflowAccessors(t *testing.T) {
	w := newWorkflow(t, nil)
	require.Equal(t, messages.ItemFailureDLQ, w.Action())
	require.Nil(t, w.Retry())
	require.Nil(t, w.Breaker())
	require.Nil(t, w.Custom())
	require.Equal(t, messages.CollectAggregate, w.Collection().Mode)
	require.NotNil(t, w.NewCollector())

	w = newWorkflow(t, &messages.ErrorPolicy{CircuitBreaker: &messages.CircuitBreakerConfig{}, ErrorCollection: &messages.ErrorCollection{Mode: messages.CollectImmediate}})
	require.NotNil(t, w.Breaker())
	require.Len(t, w.NewCollector().Add(ErrorEvent{Message: "x"}), 1)
}

func TestCollector(t *testing.T) {
	ev := func(item, msg string) ErrorEvent { return ErrorEvent{ItemID: item, Message: msg, Class: ClassError} }
	t.Run("aggregate emits nothing and groups by signature", func(t *testing.T) {
		c, err := NewCollector(nil)
		require.NoError(t, err)
		require.Empty(t, c.Add(ev("a", "open /tmp/a.txt: no such file")))
		require.Empty(t, c.Add(ev("b", "permission denied")))
		require.Empty(t, c.Add(ev("c", "open /var/b/c.txt: no such file")))
		require.Empty(t, c.Flush())
		sum := c.Summary()
		require.Len(t, sum, 2)
		require.Equal(t, int64(2), sum[0].Count)
		require.Equal(t, "open /tmp/a.txt: no such file", sum[0].Message)
		require.Equal(t, []string{"a", "c"}, sum[0].Items)
		require.Equal(t, Signature("open /x: no such file"), sum[0].Signature)
		require.Equal(t, int64(1), sum[1].Count)
	})
	t.Run("immediate emits each error", func(t *testing.T) {
		c, err := NewCollector(&messages.ErrorCollection{Mode: messages.CollectImmediate})
		require.NoError(t, err)
		out := c.Add(ev("a", "boom"))
		require.Len(t, out, 1)
		require.Equal(t, Signature("boom"), out[0].Signature)
	})
	t.Run("batched emits every N and flushes the rest", func(t *testing.T) {
		c, err := NewCollector(&messages.ErrorCollection{Mode: messages.CollectBatched, BatchSize: 3})
		require.NoError(t, err)
		var sizes []int
		for i := 0; i < 7; i++ {
			sizes = append(sizes, len(c.Add(ev(fmt.Sprint(i), "boom"))))
		}
		require.Equal(t, []int{0, 0, 3, 0, 0, 3, 0}, sizes)
		require.Len(t, c.Flush(), 1)
		require.Empty(t, c.Flush())
		require.Equal(t, int64(7), c.Summary()[0].Count)
	})
	t.Run("restore merges a saved summary", func(t *testing.T) {
		c, _ := NewCollector(nil)
		c.Add(ev("a", "boom"))
		require.NoError(t, c.Restore([]messages.ErrorSummary{{Signature: Signature("boom"), Message: "boom", Count: 4, Items: []string{"x"}}, {Signature: "s2", Message: "other", Count: 1}}))
		sum := c.Summary()
		require.Equal(t, int64(5), sum[0].Count)
		require.Equal(t, []string{"a", "x"}, sum[0].Items)
		require.Error(t, c.Restore([]messages.ErrorSummary{{Count: 1}}))
	})
	t.Run("item ids are bounded", func(t *testing.T) {
		c, _ := NewCollector(nil)
		for i := 0; i < MaxSummaryItems+10; i++ {
			c.Add(ev(fmt.Sprint(i), "boom"))
		}
		require.Len(t, c.Summary()[0].Items, MaxSummaryItems)
	})
	t.Run("signatures are bounded", func(t *testing.T) {
		c, _ := NewCollector(&messages.ErrorCollection{Mode: messages.CollectImmediate})
		word := func(i int) string { // letters only: signatures ignore numbers
			return strings.Map(func(r rune) rune { return 'g' + (r - '0') }, fmt.Sprint(i))
		}
		for i := 0; i < MaxSummarySignatures+10; i++ {
			require.Len(t, c.Add(ev("a", "error "+word(i))), 1, "events still go out")
		}
		require.Len(t, c.Summary(), MaxSummarySignatures)
		require.EqualValues(t, 10, c.Other())
	})
	_, err := NewCollector(&messages.ErrorCollection{Mode: "sometimes"})
	require.ErrorIs(t, err, ErrInvalidConfig)
}
