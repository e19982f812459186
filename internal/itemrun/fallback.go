package itemrun

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// A step's fallback (retry_config.on_failure: {fallback: ...}, Prodigy's
// on_failure handler) runs when the step gives up (stepEnds,
// failpath.go). One that reruns its step (max_attempts above 1) also runs
// after each failed run of the delivery, before the step runs again
// (runFixing): Prodigy's fix, then check the fix (docs/job-spec.md).

// decisionRerun is the decision a failed run is recorded with when the
// fallback and another run of the step followed it in the same delivery.
const decisionRerun = "rerun"

// fixRun is the outcome of the fallback that runFixing ran after step's
// last failed run: the give-up reads it instead of running the fallback a
// second time for the same failure.
type fixRun struct {
	step int
	out  string
	err  error
}

// runFixing runs step i (runStep). When the run fails and the step's
// fallback reruns it, the fallback runs and then the step again, up to
// max_attempts runs in all, in this delivery and its directory, so that
// the fallback's fix is checked at once: the step succeeds when a run
// does. The runs stop early at shutdown, at a permanent error and when
// the item's agent_timeout is up; the give-up then runs the fallback as
// it would without reruns. After the last failed run the fallback has run
// too: its outcome waits in it.fixed for the give-up. A fallback that
// fails ends the runs under handler_failure_fatal, the step's failure made
// permanent so that it gives up at once. Each failed run that another
// follows is recorded in the item's history (decision rerun). The caller
// holds the step's limit, which covers the fallback's runs too.
func (a *Agent) runFixing(ctx context.Context, it *item, i, attempt int) (out string, f *retry.Failure, dur time.Duration) {
	it.fixed = nil
	if out, f, dur = a.runStep(ctx, it, i, attempt); f == nil {
		return out, f, dur
	}
	fa := it.set.policies[i].OnFailure()
	for run := 1; f != nil && fa.Reruns(); run++ {
		if ctx.Err() != nil || retry.IsPermanent(f.Err) || it.deadline.Passed(a.cfg.hooks.Clock.Now()) {
			it.fixed = nil
			return out, f, dur
		}
		fbOut, fbF := a.fallback(ctx, it, i, attempt, fa)
		var fbErr error
		if fbF != nil {
			fbErr = fbF.Error()
		}
		it.fixed = &fixRun{step: i, out: fbOut, err: fbErr}
		switch {
		case fbErr != nil && fa.HandlerFatal:
			f.Err = retry.Permanent(fmt.Errorf("%w (handler_failure_fatal: its fallback failed)", f.Error()))
			return out, f, dur
		case run >= fa.Runs:
			return out, f, dur
		}
		a.metrics.attempts.WithLabelValues("failure").Inc()
		att := a.attempt(it, i, attempt, f, retry.Classify(*f), dur)
		att.Decision, att.ItemRun = decisionRerun, itemRun(it)
		a.pushHistory(it, att)
		out, f, dur = a.runStep(ctx, it, i, attempt)
	}
	it.fixed = nil
	return out, f, dur
}

// fallbackOutcome is the outcome of step i's fallback for its give-up:
// that of the run runFixing made after the step's last failed run, or a
// run of its own (runFallback).
func (a *Agent) fallbackOutcome(ctx context.Context, it *item, i, attempt int) (string, error) {
	if r := it.fixed; r != nil && r.step == i {
		it.fixed = nil
		return r.out, r.err
	}
	return a.runFallback(ctx, it, i, attempt)
}

// runFallback runs step i's fallback. It takes the step's limit like the
// step does, waiting for it in the agent for up to the fallback's timeout
// (the failure path cannot send the item back to wait).
func (a *Agent) runFallback(ctx context.Context, it *item, i, attempt int) (string, error) {
	fa := it.set.policies[i].OnFailure()
	timeout := a.fallbackTimeout(it, i, fa)
	var t *limit.Ticket
	if q, has, err := a.limitRequest(it, &it.set.steps[i]); err != nil {
		return "", err
	} else if has {
		q.MaxWait = timeout
		if t, _, err = a.limits.Acquire(ctx, q); err != nil {
			return "", fmt.Errorf("fallback: limit %q: %w", q.Label, err)
		} else if t == nil {
			return "", fmt.Errorf("fallback: limit %q: no token or slot within %s", q.Label, timeout)
		}
	}
	var out string
	f := a.runLimited(ctx, t, func() *retry.Failure {
		var rf *retry.Failure
		out, rf = a.fallback(ctx, it, i, attempt, fa)
		return rf
	})
	if f != nil {
		return "", f.Error()
	}
	return out, nil
}

// fallback runs step i's fallback once, under the step's limit if it has
// one (the caller holds it). ${shell.output} is the failed run's output,
// stdout then stderr, as Prodigy gives its handlers.
func (a *Agent) fallback(ctx context.Context, it *item, i, attempt int, fa retry.FailureAction) (string, *retry.Failure) {
	failed := strings.TrimRight(it.ran.stdout, "\n")
	if it.ran.stderr != "" {
		failed = strings.TrimRight(failed+"\n"+it.ran.stderr, "\n")
	}
	ran := it.ran // the step's run, which its on_exit_code reads after
	it.justRan = &failed
	defer func() { it.ran, it.justRan = ran, nil }()
	return a.runHandlers(ctx, it, it.set.fallbacks[i], a.fallbackTimeout(it, i, fa), attempt)
}

// fallbackTimeout bounds a run of step i's fallback: its own timeout, or
// the step's, and no later than the item's agent_timeout.
func (a *Agent) fallbackTimeout(it *item, i int, fa retry.FailureAction) time.Duration {
	d := cmp.Or(fa.Timeout, a.stepTimeout(it.set.steps[i].Timeout.D()))
	return it.deadline.Bound(a.cfg.hooks.Clock.Now(), d)
}
