package messages

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The event payloads (the coordinator's and the agents') keep the JSON field names consumers read, and each
// names its event and subject token.
func TestEventPayloads(t *testing.T) {
	now := time.Unix(0, 0).UTC()
	tests := []struct {
		data        EventPayload
		name, token string
		keys        []string // at least these; exactly these when exact
		exact       bool
	}{
		{JobSubmittedEvent{Items: 3, Pool: "p"}, "JobSubmitted", EventSubmitted, []string{"items", "pool"}, true},
		{JobRejectedEvent{}, "JobRejected", EventRejected, []string{"problems"}, true},
		{JobStartedEvent{Items: 3}, "JobStarted", EventStarted, []string{"items"}, true},
		{JobCompletedEvent{ID: "j", State: StateSucceeded, FinishedAt: &now}, "JobCompleted", EventCompleted, []string{"id", "state", "items", "succeeded", "not_run", "finished_at"}, false},
		{MapPhaseEndedEvent{}, "MapPhaseEnded", EventMapEnded, []string{"state", "reason"}, true},
		{JobStoppedEvent{}, "JobStopped", EventStopped, []string{"reason", "succeeded", "failed", "dead_lettered", "skipped", "not_run"}, true},
		{BestEffortCompletionEvent{}, "BestEffortCompletion", EventBestEffort, []string{"reason", "groups", "groups_completed", "min_groups", "success", "completion_ratio", "not_run"}, true},
		{LateResultEvent{}, "LateResult", EventLateResult, []string{"item_id", "index", "outcome", "policy", "group"}, true},
		{JobResultAmendedEvent{}, "JobResultAmended", EventLateResult, []string{"item_id", "index", "outcome", "policy", "group"}, true},
		{ItemFailedEvent{}, "ItemFailed", EventItemFailed, []string{"item_id", "class", "message", "signature", "outcome", "reason"}, true},
		{ErrorBatchEvent{}, "ErrorBatch", EventErrorBatch, []string{"count", "errors"}, true},
		{ReduceStartedEvent{}, "ReduceStarted", EventReduce, []string{"results_object", "successful", "failed", "items", "dead_lettered", "skipped", "not_run"}, true},
		{ReduceCompletedEvent{}, "ReduceCompleted", EventReduce, []string{"state", "generation"}, false},
		{DLQNearlyFullEvent{}, "DLQNearlyFull", EventDLQ, []string{"messages", "bytes", "max_messages", "max_bytes", "max_age_ms", "fill_ratio"}, true},
		{DLQPoolMissingEvent{Pool: "p", Problem: "x"}, "DLQPoolMissing", EventDLQ, []string{"pool", "messages", "bytes", "max_messages", "max_bytes", "max_age_ms", "fill_ratio", "problem"}, true},
		{DLQReplayStartedEvent{}, "DLQReplayStarted", EventReplay, []string{"matched", "replayed", "failed", "skipped", "filter"}, false},
		{DLQReplayProgressEvent{}, "DLQReplayProgress", EventReplay, []string{"matched", "replayed", "failed", "skipped", "filter"}, false},
		{DLQReplayFinishedEvent{}, "DLQReplayFinished", EventReplay, []string{"matched", "replayed", "failed", "skipped", "filter"}, false},
		{BudgetExhaustedEvent{}, "RetryBudgetExhausted", EventBudget, []string{"job_id", "item_id", "scope", "reason", "consumed", "limit"}, true},
		{BreakerChangedEvent{}, "CircuitBreakerStateChanged", EventBreaker, []string{"job_id", "from", "to", "failures", "successes", "probes", "agent"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := EventOf(tt.data); got != tt.name {
				t.Errorf("EventOf name = %q, want %q", got, tt.name)
			}
			if _, got := EventOf(tt.data); got != tt.token {
				t.Errorf("EventOf token = %q, want %q", got, tt.token)
			}
			raw, err := json.Marshal(tt.data)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range tt.keys {
				if _, ok := m[k]; !ok {
					t.Errorf("%s: no %q in %s", tt.name, k, raw)
				}
			}
			if tt.exact && len(m) != len(tt.keys) {
				var got []string
				for k := range m {
					got = append(got, k)
				}
				slices.Sort(got)
				t.Errorf("%s: keys %v, want %v", tt.name, got, tt.keys)
			}
		})
	}
}

// An error batch's entries keep the fields of the collector's events.
func TestErrorBatchEntryJSON(t *testing.T) {
	raw, err := json.Marshal(ErrorBatchEvent{Count: 1, Errors: []ItemErrorEntry{{ItemID: "i", Message: "m", Signature: "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"count":1,"errors":[{"item_id":"i","message":"m","signature":"s"}]}`
	if string(raw) != want {
		t.Errorf("got %s, want %s", raw, want)
	}
}
