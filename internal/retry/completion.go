package retry

import "github.com/jetfleet/jetfleet/pkg/messages"

// Tally is a job's item counts as its map phase sees them: how many items
// it has and how each item with an outcome ended (NotRun: items a stopped
// map phase did not run, which a DLQ replay's reopening keeps). The coordinator and the outage
// simulator (internal/simulate) both keep one and ask [Workflow.MapEnd] after
// every result.
type Tally struct {
	Items, Succeeded, Failed, DeadLettered, Skipped, NotRun int64
}

// Done is the number of items with an outcome, not_run included.
func (t Tally) Done() int64 { return t.Succeeded + t.Failed + t.DeadLettered + t.Skipped + t.NotRun }

// Counts are the counts error_policy's thresholds read: the items that
// finished, and of them the failed ones (skipped items count as failed:
// they were skipped after failing).
func (t Tally) Counts() Counts {
	return Counts{
		Finished: t.Succeeded + t.Failed + t.DeadLettered + t.Skipped,
		Failed:   t.Failed + t.DeadLettered + t.Skipped,
	}
}

// State is the state of a job whose map phase completes now, without
// best_effort: failed when an item failed, was dead-lettered or has no
// outcome, else succeeded.
func (t Tally) State() string {
	if t.Failed+t.DeadLettered > 0 || t.Done() < t.Items {
		return messages.StateFailed
	}
	return messages.StateSucceeded
}

// MapEnd decides, after a result, whether the job's map phase ends, in
// which state and why. t are the counts with the result in; failed says
// the result was a failure (dead-lettered or failed); policies says
// whether error_policy applies to it (not to a job a DLQ replay reopened,
// which already ended once, nor while a coordinator replays the results
// it had). In order:
//
//  1. on_item_failure: stop ends it at a failure: stopped, item_failure_stop;
//  2. [Workflow.Check]'s thresholds: stopped, for their reason;
//  3. every item done: t.State(), all_completed (best_effort decides the
//     state otherwise: the caller's).
//
// A nil Workflow has no error_policy: only 3 applies. Deadlines and
// best_effort's min_groups are the caller's: they need a clock and groups.
func (w *Workflow) MapEnd(t Tally, failed, policies bool) (end bool, state, reason string) {
	if w != nil && policies {
		if failed && w.action == messages.ItemFailureStop {
			return true, messages.StateStopped, messages.CompletionItemStop
		}
		if stop, why := w.Check(t.Counts()); stop {
			return true, messages.StateStopped, why
		}
	}
	if t.Done() >= t.Items {
		return true, t.State(), messages.CompletionAllCompleted
	}
	return false, "", ""
}
