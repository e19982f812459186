package agent

import (
	"context"
	"errors"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// retryItem handles a failed item under on_item_failure: retry. While
// error_policy.retry_config has runs left (and the error is not permanent)
// and the job's retry budget grants a unit, the item's state goes back to
// its first step and the message is naked with the whole-item backoff:
// handled is true. Otherwise why is the reason the item is dead-lettered
// with: item_retries, or the budget's denial.
func (a *Agent) retryItem(ctx context.Context, it *item, err error) (handled bool, why string) {
	run := max(it.st.ItemRun, 1)
	v := it.job.workflow.OnItemFailure(retry.ItemFailure{Run: run, LastDelay: it.st.ItemDelay.D(), Err: err}, retry.Counts{}, a.cfg.Rand)
	if v.Action != messages.ItemFailureRetry {
		return false, v.Reason
	}
	granted, reason, cerr := a.claim(ctx, it)
	if cerr != nil {
		a.log.Warn().Err(cerr).Str("item_id", it.wi.ItemID).Msg("budget claim failed; retrying later")
		a.nakDelay(it, time.Second)
		return true, ""
	}
	if !granted {
		return false, reason
	}
	if n := len(it.st.History); n > 0 {
		last := &it.st.History[n-1]
		last.Decision, last.DelayMS = "item_retry", v.Delay.Milliseconds()
	}
	it.st.ItemRun = run + 1
	it.st.ItemDelay = messages.Duration(v.Delay)
	it.st.Step, it.st.Outputs = 0, nil
	retry.State{}.ApplyTo(&it.st)
	it.st.Retries++
	if err := a.saveState(ctx, it); err != nil {
		if isFenced(err) {
			a.log.Warn().Str("item_id", it.wi.ItemID).Msg("item state changed under us; stepping aside")
			return true, ""
		}
		a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("cannot persist the item retry; redelivering without it")
	}
	a.metrics.retries.WithLabelValues("item").Inc()
	a.nakDelay(it, v.Delay)
	return true, ""
}

// runCustom runs error_policy.on_item_failure's custom step with the failed
// item: a shell command (with FAILURE_REASON and FAILURE_ERROR in its
// environment besides the usual ITEM_JSON, ITEM_ID, JOB_ID) or a handler
// (with Call.Cause set). A nil error means the custom step took the item
// over: it is recorded as failed, without a dead letter.
func (a *Agent) runCustom(ctx context.Context, it *item, reason string, cause error) error {
	step := it.job.workflow.Custom()
	if step == nil {
		return errors.New("no custom step")
	}
	msg := ""
	if cause != nil {
		msg = truncate(cause.Error(), maxMessageBytes)
	}
	var f *retry.Failure
	if step.Shell != "" {
		_, f = a.runShell(ctx, it, it.job.custom, step.Timeout.D(), 1, "FAILURE_REASON="+reason, "FAILURE_ERROR="+msg)
	} else {
		_, f = a.invokeHandler(ctx, it, step, &Call{
			JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
			StepName: "on_item_failure", Attempt: 1, Item: it.wi.Payload, With: step.With, Cause: cause,
		})
	}
	if f != nil {
		return f.Error()
	}
	return nil
}
