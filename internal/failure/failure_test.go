package failure

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The pure verdicts: what follows a failed step run or a failed item,
// without a server (the agent's tests run whole deliveries through them).

var (
	errBoom = errors.New("boom")
	t0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
)

func TestStepVerdict(t *testing.T) {
	failure := errors.New("connection reset")
	policyGaveUp := &retry.GiveUpError{Reason: messages.ReasonAttempts, Attempts: 3, Err: failure}
	st := retry.State{Attempts: 2, FirstFailure: t0, DelaySpent: time.Second, LastDelay: time.Second}
	retryD := retry.Decision{Action: retry.ActionRetry, Delay: 2 * time.Second, State: st}
	itemDeny := &budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 5, Limit: 5}
	jobDeny := &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 50, Limit: 50}
	giveUp := func(reason string) retry.Decision {
		return retry.Decision{Action: retry.ActionGiveUp, Reason: reason, Err: policyGaveUp, State: st}
	}
	cases := []struct {
		name       string
		in         StepFailure
		needsClaim bool
		breaker    retry.Outcome
		want       End    // compared without its errors
		wantErr    error  // errors.Is of Err()
		errReason  string // the *retry.GiveUpError's reason
	}{
		{
			name: "retry granted", in: StepFailure{Decision: retryD, Err: failure, Grant: budget.Grant{Granted: true}},
			needsClaim: true, breaker: retry.OutcomeFailure,
			want: End{Kind: EndRetry, Delay: 2 * time.Second, State: st},
		},
		{
			name: "snooze", in: StepFailure{Decision: retry.Decision{Action: retry.ActionSnooze, Delay: time.Minute, State: st}, Err: failure},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndSnooze, Delay: time.Minute, State: st},
		},
		{
			name: "give up: attempts", in: StepFailure{Decision: giveUp(messages.ReasonAttempts), Err: failure},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonAttempts, State: st}, wantErr: policyGaveUp,
		},
		{
			name: "give up: retry_budget", in: StepFailure{Decision: giveUp(messages.ReasonRetryBudget), Err: failure},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonRetryBudget, State: st}, wantErr: policyGaveUp,
		},
		{
			name: "give up: not_retryable", in: StepFailure{Decision: giveUp(messages.ReasonNotRetryable), Err: failure},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonNotRetryable, State: st}, wantErr: policyGaveUp,
		},
		{
			name: "give up: permanent", in: StepFailure{Decision: giveUp(messages.ReasonPermanent), Err: failure},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonPermanent, State: st}, wantErr: policyGaveUp,
		},
		{
			name: "give up on the last delivery: the policy's reason stays", in: StepFailure{Decision: giveUp(messages.ReasonAttempts), Err: failure, LastDelivery: true},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonAttempts, State: st}, wantErr: policyGaveUp,
		},
		{
			name: "retry on the last delivery: max_deliveries, no claim", in: StepFailure{Decision: retryD, Err: failure, LastDelivery: true},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonMaxDeliveries, State: st}, wantErr: failure, errReason: messages.ReasonMaxDeliveries,
		},
		{
			name: "snooze on the last delivery: max_deliveries", in: StepFailure{Decision: retry.Decision{Action: retry.ActionSnooze, Delay: time.Minute, State: st}, Err: failure, LastDelivery: true},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonMaxDeliveries, State: st}, wantErr: failure, errReason: messages.ReasonMaxDeliveries,
		},
		{
			name: "item budget denied", in: StepFailure{Decision: retryD, Err: failure, Grant: budget.Grant{Deny: itemDeny}},
			needsClaim: true, breaker: retry.OutcomeFailure,
			want: End{Kind: EndGiveUp, Reason: messages.ReasonItemBudget, State: st, Deny: itemDeny}, wantErr: failure, errReason: messages.ReasonItemBudget,
		},
		{
			name: "job budget denied", in: StepFailure{Decision: retryD, Err: failure, Grant: budget.Grant{Deny: jobDeny}},
			needsClaim: true, breaker: retry.OutcomeFailure,
			want: End{Kind: EndGiveUp, Reason: messages.ReasonJobBudget, State: st, Deny: jobDeny}, wantErr: failure, errReason: messages.ReasonJobBudget,
		},
		{
			name: "a grant without a deny is the job budget's denial", in: StepFailure{Decision: retryD, Err: failure},
			needsClaim: true, breaker: retry.OutcomeFailure,
			want: End{Kind: EndGiveUp, Reason: messages.ReasonJobBudget, State: st}, wantErr: failure, errReason: messages.ReasonJobBudget,
		},
		// The step's own circuit breaker refused the run: it fails fast,
		// its state unchanged, and says nothing of the dependency.
		{
			name: "circuit open: fail fast", in: StepFailure{Decision: retry.Decision{State: st}, Err: retry.ErrCircuitOpen, NotRun: true, CircuitOpen: true},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndGiveUp, Reason: messages.ReasonCircuitOpen, State: st}, wantErr: retry.ErrCircuitOpen, errReason: messages.ReasonCircuitOpen,
		},
		// agent_timeout (t0 + 10s here): a retry that would come back at or
		// after it, or a run that ended past it, ends the item; a retry
		// that comes back before it is claimed as usual.
		{
			name: "agent_timeout: the retry would come back too late", in: StepFailure{Decision: retryD, Err: failure,
				Now: t0.Add(8 * time.Second), Deadline: retry.NewDeadline(t0, 10*time.Second), Grant: budget.Grant{Granted: true}},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndTimedOut, Reason: messages.ReasonAgentTimeout, State: st}, wantErr: retry.ErrAgentTimeout, errReason: messages.ReasonAgentTimeout,
		},
		{
			name: "agent_timeout: the retry comes back in time", in: StepFailure{Decision: retryD, Err: failure,
				Now: t0.Add(7 * time.Second), Deadline: retry.NewDeadline(t0, 10*time.Second), Grant: budget.Grant{Granted: true}},
			needsClaim: true, breaker: retry.OutcomeFailure,
			want: End{Kind: EndRetry, Delay: 2 * time.Second, State: st},
		},
		{
			name: "agent_timeout: a snooze past it", in: StepFailure{Decision: retry.Decision{Action: retry.ActionSnooze, Delay: time.Minute, State: st}, Err: failure,
				Now: t0, Deadline: retry.NewDeadline(t0, 10*time.Second)},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndTimedOut, Reason: messages.ReasonAgentTimeout, State: st}, wantErr: failure, errReason: messages.ReasonAgentTimeout,
		},
		{
			name: "agent_timeout: up before the step ran", in: StepFailure{Decision: retry.Decision{State: st}, Err: retry.ErrAgentTimeout, NotRun: true,
				Now: t0.Add(11 * time.Second), Deadline: retry.NewDeadline(t0, 10*time.Second)},
			breaker: retry.OutcomeIgnored,
			want:    End{Kind: EndTimedOut, Reason: messages.ReasonAgentTimeout, State: st}, wantErr: retry.ErrAgentTimeout, errReason: messages.ReasonAgentTimeout,
		},
		{
			name: "agent_timeout: the run ended past it, whatever the policy says", in: StepFailure{Decision: giveUp(messages.ReasonAttempts), Err: failure,
				Now: t0.Add(10 * time.Second), Deadline: retry.NewDeadline(t0, 10*time.Second)},
			breaker: retry.OutcomeFailure,
			want:    End{Kind: EndTimedOut, Reason: messages.ReasonAgentTimeout, State: st}, wantErr: failure, errReason: messages.ReasonAgentTimeout,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.needsClaim, tc.in.NeedsClaim())
			require.Equal(t, tc.breaker, tc.in.Breaker())
			got := tc.in.Verdict()
			err := got.Err()
			got.decided, got.cause = nil, nil
			require.Equal(t, tc.want, got)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			var gu *retry.GiveUpError
			require.ErrorAs(t, err, &gu)
			if tc.errReason != "" {
				require.Equal(t, tc.errReason, gu.Reason)
				require.Equal(t, st.Attempts, gu.Attempts)
			}
		})
	}
}

func TestItemVerdict(t *testing.T) {
	stepErr := &retry.GiveUpError{Reason: messages.ReasonAttempts, Attempts: 3, Err: errBoom}
	again := retry.Verdict{Action: messages.ItemFailureRetry, Delay: 4 * time.Second}
	spent := retry.Verdict{Action: messages.ItemFailureDLQ, Reason: messages.ReasonItemRetryExhausted, Final: true}
	jobDeny := &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 10, Limit: 10}
	itemDeny := &budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 2, Limit: 2}
	customErr := errors.New("custom handler down")
	failed := func(action string) ItemFailure {
		return ItemFailure{Action: action, Reason: messages.ReasonAttempts, Err: stepErr}
	}
	with := func(f ItemFailure, edit func(*ItemFailure)) ItemFailure { edit(&f); return f }
	cases := []struct {
		name       string
		in         ItemFailure
		needsClaim bool
		want       End // Err() compared with errors.Is below
		wantErrs   []error
	}{
		{
			name: "dlq", in: failed(messages.ItemFailureDLQ),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonAttempts}, wantErrs: []error{stepErr},
		},
		{
			name: "stop: dead-lettered, the coordinator stops the job", in: failed(messages.ItemFailureStop),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonAttempts}, wantErrs: []error{stepErr},
		},
		{
			name: "skip", in: failed(messages.ItemFailureSkip),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeSkipped, Reason: messages.ReasonAttempts}, wantErrs: []error{stepErr},
		},
		{
			name: "custom ok: the custom step took the item over", in: failed(messages.ItemFailureCustom),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeFailed, Reason: messages.ReasonAttempts}, wantErrs: []error{stepErr},
		},
		{
			name: "custom failed", in: with(failed(messages.ItemFailureCustom), func(f *ItemFailure) { f.CustomErr = customErr }),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonCustomFailed}, wantErrs: []error{stepErr, customErr},
		},
		{
			name: "retry granted", in: with(failed(messages.ItemFailureRetry), func(f *ItemFailure) { f.Retry, f.Grant = again, budget.Grant{Granted: true} }),
			needsClaim: true,
			want:       End{Kind: EndItemRetry, Delay: 4 * time.Second},
		},
		{
			name: "retry: runs spent", in: with(failed(messages.ItemFailureRetry), func(f *ItemFailure) { f.Retry = spent }),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonItemRetryExhausted}, wantErrs: []error{stepErr},
		},
		{
			name: "retry denied by the job budget", in: with(failed(messages.ItemFailureRetry), func(f *ItemFailure) { f.Retry, f.Grant = again, budget.Grant{Deny: jobDeny} }),
			needsClaim: true,
			want:       End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonJobBudget, Deny: jobDeny}, wantErrs: []error{stepErr},
		},
		{
			name: "retry denied by the item budget", in: with(failed(messages.ItemFailureRetry), func(f *ItemFailure) { f.Retry, f.Grant = again, budget.Grant{Deny: itemDeny} }),
			needsClaim: true,
			want:       End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonItemBudget, Deny: itemDeny}, wantErrs: []error{stepErr},
		},
		{
			name: "dlq with a workflow retry_config: re-run granted", in: with(failed(messages.ItemFailureDLQ), func(f *ItemFailure) { f.Retry, f.Grant = again, budget.Grant{Granted: true} }),
			needsClaim: true,
			want:       End{Kind: EndItemRetry, Delay: 4 * time.Second},
		},
		{
			name: "dlq with a workflow retry_config: runs spent", in: with(failed(messages.ItemFailureDLQ), func(f *ItemFailure) { f.Retry = spent }),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonItemRetryExhausted}, wantErrs: []error{stepErr},
		},
		{
			name: "dlq with a workflow retry_config: re-run denied by the job budget", in: with(failed(messages.ItemFailureDLQ), func(f *ItemFailure) { f.Retry, f.Grant = again, budget.Grant{Deny: jobDeny} }),
			needsClaim: true,
			want:       End{Kind: EndGiveUp, Outcome: messages.OutcomeDeadLettered, Reason: messages.ReasonJobBudget, Deny: jobDeny}, wantErrs: []error{stepErr},
		},
		{
			name: "a reduce item fails: its outcome is the job's, whatever on_item_failure says",
			in:   with(failed(messages.ItemFailureRetry), func(f *ItemFailure) { f.Reduce, f.Retry = true, again }),
			want: End{Kind: EndGiveUp, Outcome: messages.OutcomeFailed, Reason: messages.ReasonAttempts}, wantErrs: []error{stepErr},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.needsClaim, tc.in.NeedsClaim())
			got := tc.in.Verdict()
			err := got.Err()
			got.err = nil
			require.Equal(t, tc.want, got)
			if len(tc.wantErrs) == 0 {
				require.NoError(t, err)
			}
			for _, want := range tc.wantErrs {
				require.ErrorIs(t, err, want)
			}
		})
	}
}

// TestEndOnFailure: a step's give-up under its on_failure.
func TestEndOnFailure(t *testing.T) {
	fbErr := errors.New("fallback down")
	gaveUp := End{Kind: EndGiveUp, Reason: messages.ReasonAttempts, cause: errBoom}
	cases := []struct {
		name  string
		in    End
		fa    retry.FailureAction
		fbErr error
		want  EndKind
	}{
		{"stop: the item fails", gaveUp, retry.FailureAction{Action: messages.OnFailureStop}, nil, EndGiveUp},
		{"continue", gaveUp, retry.FailureAction{Action: messages.OnFailureContinue}, nil, EndContinue},
		{"fallback ok", gaveUp, retry.FailureAction{Action: messages.OnFailureFallback, Fallback: "save.sh"}, nil, EndFallback},
		{"fallback fails: the item fails", gaveUp, retry.FailureAction{Action: messages.OnFailureFallback, Fallback: "save.sh"}, fbErr, EndGiveUp},
		{"a timed-out step: on_failure does not apply", End{Kind: EndTimedOut}, retry.FailureAction{Action: messages.OnFailureContinue}, nil, EndTimedOut},
		{"a retry: unchanged", End{Kind: EndRetry}, retry.FailureAction{Action: messages.OnFailureContinue}, nil, EndRetry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.OnFailure(tc.fa, "saved", tc.fbErr)
			require.Equal(t, tc.want, got.Kind)
			if got.Kind == EndFallback {
				require.Equal(t, "saved", got.Output)
			}
			if tc.fbErr != nil {
				require.ErrorIs(t, got.Err(), tc.fbErr)
				require.ErrorIs(t, got.Err(), errBoom)
			}
		})
	}
}
