package retry

import (
	"errors"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// MinFinishedForThreshold is how many items must have finished before
// error_policy.failure_threshold is applied.
const MinFinishedForThreshold = 10

// Workflow is a job's compiled error_policy (docs/contract.md §4, workflow level): what
// follows an item failure and when the job stops. It is immutable and safe
// for concurrent use.
type Workflow struct {
	action            string
	custom            *messages.Step
	continueOnFailure bool
	maxFailures       int
	hasMaxFailures    bool
	threshold         float64
	hasThreshold      bool
	retry             *WorkflowPolicy
	breaker           *Breaker
	collection        messages.ErrorCollection
}

// NewWorkflow compiles ep (nil = defaults): on_item_failure dlq,
// continue_on_failure true, no max_failures or failure_threshold, aggregate
// error collection, no circuit breaker, and — for on_item_failure: retry —
// error_policy.retry_config with its defaults (3 runs, exponential 1s..30s).
// Problems are reported with their path under error_policy.
func NewWorkflow(ep *messages.ErrorPolicy) (*Workflow, error) {
	if ep == nil {
		ep = &messages.ErrorPolicy{}
	}
	w := &Workflow{
		action:            messages.ItemFailureDLQ,
		continueOnFailure: true,
		collection:        messages.ErrorCollection{Mode: messages.CollectAggregate},
	}
	var ce ConfigError
	if a := ep.OnItemFailure; a != nil {
		switch a.Action {
		case "":
		case messages.ItemFailureDLQ, messages.ItemFailureRetry, messages.ItemFailureSkip, messages.ItemFailureStop:
			w.action = a.Action
		case messages.ItemFailureCustom:
			w.action = a.Action
			if a.Custom == nil || a.Custom.Shell == "" && a.Custom.Handler == "" {
				ce.add("on_item_failure.custom", "needs a shell command or a handler")
			}
			w.custom = a.Custom
		default:
			ce.add("on_item_failure", "must be dlq, retry, skip, stop or {custom: step}, got %q", a.Action)
		}
	}
	if ep.ContinueOnFailure != nil {
		w.continueOnFailure = *ep.ContinueOnFailure
	}
	if ep.MaxFailures != nil {
		w.maxFailures, w.hasMaxFailures = *ep.MaxFailures, true
		if w.maxFailures < 1 {
			ce.add("max_failures", "must be >= 1, got %d", w.maxFailures)
		}
	}
	if ep.FailureThreshold != nil {
		w.threshold, w.hasThreshold = *ep.FailureThreshold, true
		if !(w.threshold > 0 && w.threshold <= 1) {
			ce.add("failure_threshold", "must be in (0, 1], got %v", w.threshold)
		}
	}
	if ec := ep.ErrorCollection; ec != nil {
		if err := checkCollection(ec); err != nil {
			ce.Problems = append(ce.Problems, prefixed("error_collection", err)...)
		} else if ec.Mode != "" {
			w.collection = *ec
		}
	}
	if ep.CircuitBreaker != nil {
		b, err := NewBreaker(ep.CircuitBreaker)
		ce.Problems = append(ce.Problems, prefixed("circuit_breaker", err)...)
		w.breaker = b
	}
	if w.action == messages.ItemFailureRetry || ep.RetryConfig != nil {
		rp, err := NewWorkflowPolicy(ep.RetryConfig)
		ce.Problems = append(ce.Problems, prefixed("retry_config", err)...)
		if RetriesItems(w.action) {
			w.retry = rp
		}
	}
	if err := ce.err(); err != nil {
		return nil, err
	}
	return w, nil
}

// prefixed returns the problems of a *ConfigError with prefix added to their paths.
func prefixed(prefix string, err error) []messages.FieldError {
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return []messages.FieldError{{Field: prefix, Message: problemText(err)}}
	}
	out := make([]messages.FieldError, len(ce.Problems))
	for i, p := range ce.Problems {
		out[i] = messages.FieldError{Field: joinPath(prefix, p.Field), Message: p.Message}
	}
	return out
}

func joinPath(prefix, field string) string {
	switch {
	case field == "":
		return prefix
	case strings.HasPrefix(field, "["):
		return prefix + field
	}
	return prefix + "." + field
}

// RetriesItems reports whether on_item_failure action re-runs a failed item
// as a whole under error_policy.retry_config: retry (with retry_config's
// defaults when it is unset) and dlq (only when retry_config is set: the
// item is dead-lettered once its runs are spent). Under skip, stop and
// custom, retry_config has no effect.
func RetriesItems(action string) bool {
	return action == messages.ItemFailureRetry || action == messages.ItemFailureDLQ
}

// Action is on_item_failure: dlq, retry, skip, stop or custom.
func (w *Workflow) Action() string { return w.action }

// Custom is the step run for on_item_failure: custom (nil otherwise).
func (w *Workflow) Custom() *messages.Step { return w.custom }

// Retry is the whole-item retry policy: nil unless on_item_failure is
// retry, or dlq with error_policy.retry_config set.
func (w *Workflow) Retry() *WorkflowPolicy { return w.retry }

// Breaker is the job's circuit breaker, nil when none is configured.
func (w *Workflow) Breaker() *Breaker { return w.breaker }

// Collection is the error_collection mode (Mode is never empty).
func (w *Workflow) Collection() messages.ErrorCollection { return w.collection }

// NewCollector returns an empty collector for the job's error_collection.
func (w *Workflow) NewCollector() *Collector {
	c, _ := NewCollector(&w.collection) // checked by NewWorkflow
	return c
}

// Counts are a job's item counts.
type Counts struct {
	// Finished is the number of items in a terminal state.
	Finished int64
	// Failed is the number of those that failed (dead-lettered, skipped
	// after a failure, failed).
	Failed int64
}

// Check reports whether a job with counts c must stop, and why
// (messages.CompletionFirstFailure, CompletionMaxFailures or
// CompletionFailureThreshold, in that order of precedence):
// continue_on_failure: false stops at the first failure, max_failures when
// Failed >= max_failures, failure_threshold when Failed/Finished > threshold
// with at least [MinFinishedForThreshold] items finished. Call it after
// every result: a success can bring Finished to 10 with a rate already over
// the threshold.
func (w *Workflow) Check(c Counts) (stop bool, reason string) {
	switch {
	case c.Failed <= 0:
		return false, ""
	case !w.continueOnFailure:
		return true, messages.CompletionFirstFailure
	case w.hasMaxFailures && c.Failed >= int64(w.maxFailures):
		return true, messages.CompletionMaxFailures
	case w.hasThreshold && c.Finished >= MinFinishedForThreshold &&
		float64(c.Failed)/float64(c.Finished) > w.threshold:
		return true, messages.CompletionFailureThreshold
	}
	return false, ""
}

// ItemFailure is an item that failed (its steps gave up).
type ItemFailure struct {
	// Run is the 1-based whole-item run that failed (ItemState.ItemRun; 1
	// when the item was never re-run).
	Run int
	// LastDelay is the delay before this run (0 for the first).
	LastDelay time.Duration
	// Err is the item's error. A [Permanent] marker disables whole-item retries.
	Err error
}

// Verdict is what follows an item failure.
type Verdict struct {
	// Action is messages.ItemFailureDLQ, ItemFailureRetry, ItemFailureSkip,
	// ItemFailureStop or ItemFailureCustom. Under on_item_failure: retry,
	// and dlq with a retry_config, it is retry while runs remain, then dlq.
	Action string
	// Delay is the backoff before the item's next run (retry only).
	Delay time.Duration
	// Custom is the step to run with the failed item (custom only).
	Custom *messages.Step
	// Reason is messages.ReasonItemRetryExhausted when the whole-item
	// retries ran out of runs (or the error was permanent) and the item
	// goes to the DLQ; "" otherwise.
	Reason string
	// Final is true when the item reaches a terminal state (every action
	// but retry): it is then counted as finished and failed.
	Final bool
	// StopJob is true when the job stops: its remaining items are not run.
	// The failed item itself still gets Action (a tripping item still
	// reaches the DLQ).
	StopJob bool
	// StopReason is a messages.Completion* reason: item_failure_stop
	// (on_item_failure: stop), first_failure, max_failures or
	// failure_threshold.
	StopReason string
}

// OnItemFailure decides what follows an item failure: under
// on_item_failure retry, and dlq with error_policy.retry_config set, the
// item runs again as a whole (a new run from its first step, on any agent)
// until max_attempts runs are spent, then goes to the DLQ. c are the job's
// counts before this failure; when the failure is final it is added to them
// (Finished+1, Failed+1) before [Workflow.Check]. r is the jitter source of
// whole-item retries (nil = [DefaultRand]).
func (w *Workflow) OnItemFailure(f ItemFailure, c Counts, r Rand) Verdict {
	v := Verdict{Action: w.action, Final: true}
	switch {
	case w.retry != nil: // retry, or dlq with a retry_config: re-run the item, then dead-letter it
		if d, ok := w.retry.Next(max(f.Run, 1), f.LastDelay, r); ok && !IsPermanent(f.Err) {
			return Verdict{Action: messages.ItemFailureRetry, Delay: d}
		}
		v.Action, v.Reason = messages.ItemFailureDLQ, messages.ReasonItemRetryExhausted
	case w.action == messages.ItemFailureCustom:
		v.Custom = w.custom
	case w.action == messages.ItemFailureStop:
		v.StopJob, v.StopReason = true, messages.CompletionItemStop
		return v
	}
	v.StopJob, v.StopReason = w.Check(Counts{Finished: c.Finished + 1, Failed: c.Failed + 1})
	return v
}

// WorkflowPolicy is error_policy.retry_config: whether a failed item runs
// again as a whole, and after which delay. It reuses [Policy]'s delays
// (legacy backoff forms included: `initial`, exponential `multiplier`). It is
// immutable and safe for concurrent use.
type WorkflowPolicy struct {
	p *Policy
}

// NewWorkflowPolicy compiles cfg (nil = 3 runs, exponential base 2 from 1s,
// capped at 30s, no jitter).
func NewWorkflowPolicy(cfg *messages.WorkflowRetryConfig) (*WorkflowPolicy, error) {
	rc := &messages.RetryConfig{}
	if cfg != nil {
		rc = &messages.RetryConfig{
			Attempts:     cfg.MaxAttempts,
			Backoff:      cfg.Backoff,
			InitialDelay: cfg.InitialDelay,
			MaxDelay:     cfg.MaxDelay,
			Jitter:       cfg.Jitter,
			JitterFactor: cfg.JitterFactor,
		}
	}
	p, err := NewPolicy(rc)
	if err != nil {
		ce := err.(*ConfigError)
		for i, pr := range ce.Problems {
			if pr.Field == "attempts" {
				ce.Problems[i].Field = "max_attempts"
			}
		}
		return nil, ce
	}
	return &WorkflowPolicy{p: p}, nil
}

// MaxAttempts is the total number of whole-item runs.
func (w *WorkflowPolicy) MaxAttempts() int { return w.p.Attempts() }

// Policy is the underlying delay policy (for its delays and String).
func (w *WorkflowPolicy) Policy() *Policy { return w.p }

// Next answers the failure of whole-item run `run` (1-based): run it again
// after delay, or give up (ok=false) when max_attempts runs are spent. prev
// is the previous delay, r the jitter source (nil = [DefaultRand]).
func (w *WorkflowPolicy) Next(run int, prev time.Duration, r Rand) (delay time.Duration, ok bool) {
	if run >= w.p.Attempts() {
		return 0, false
	}
	return w.p.Delay(run, prev, r), true
}
