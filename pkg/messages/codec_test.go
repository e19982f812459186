package messages

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func durp(s string) *Duration { d := MustDuration(s); return &d }

// TestCanonicalForms: each polymorphic value marshals to its canonical
// form, which json.Unmarshal reads back to the same value (how agents read
// the specs the coordinator stores). Package jobspec reads the other forms.
func TestCanonicalForms(t *testing.T) {
	tests := []struct {
		name      string
		value     any
		canonical string
	}{
		{"backoff name", Backoff{Kind: BackoffFibonacci}, `"fibonacci"`},
		{"backoff fixed delay", Backoff{Kind: BackoffFixed, Initial: durp("2s")}, `{"fixed":{"delay":"2s"}}`},
		{"backoff exponential", Backoff{Kind: BackoffExponential, Base: 2, Initial: durp("1s")}, `{"exponential":{"base":2,"initial":"1s"}}`},
		{"backoff linear", Backoff{Kind: BackoffLinear, Initial: durp("1s"), Increment: durp("2s")}, `{"linear":{"increment":"2s","initial":"1s"}}`},
		{"backoff custom", Backoff{Kind: BackoffCustom, Delays: []Duration{MustDuration("1s"), MustDuration("1d")}}, `{"custom":{"delays":["1s","1d"]}}`},
		{"matcher builtin", Matcher{Builtin: MatchRateLimit}, `"rate_limit"`},
		{"matcher pattern", Matcher{Pattern: "conn.*refused"}, `{"pattern":"conn.*refused"}`},
		{"matcher exit codes", Matcher{ExitCodes: []int{1, 137}}, `{"exit_code":[1,137]}`},
		{"on_failure stop", OnFailure{Action: OnFailureStop}, `"stop"`},
		{"on_failure fallback", OnFailure{Action: OnFailureFallback, Fallback: "save ${item_id}"}, `{"fallback":{"command":"save ${item_id}"}}`},
		{"on_failure fallback that reruns its step", OnFailure{Action: OnFailureFallback, Fallback: "touch fixed", MaxAttempts: 3, HandlerFailureFatal: true, Timeout: MustDuration("30s")},
			`{"fallback":{"command":"touch fixed","handler_failure_fatal":true,"max_attempts":3,"timeout":"30s"}}`},
		{"item failure dlq", ItemFailureAction{Action: ItemFailureDLQ}, `"dlq"`},
		{"item failure custom", ItemFailureAction{Action: ItemFailureCustom, Custom: &Step{Handler: "notify", With: map[string]any{"to": "ops"}}},
			`{"custom":{"handler":"notify","with":{"to":"ops"}}}`},
		{"collection immediate", ErrorCollection{Mode: CollectImmediate}, `"immediate"`},
		{"collection batched", ErrorCollection{Mode: CollectBatched, BatchSize: 50}, `{"batched":{"size":50}}`},
		{"budget count", BudgetValue{Count: 20}, `20`},
		{"budget percent", BudgetValue{Percent: 12.5, IsPercent: true}, `"12.5%"`},
		{"duration", MustDuration("150s"), `"2m30s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := json.Marshal(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.canonical {
				t.Errorf("MarshalJSON = %s, want %s", out, tt.canonical)
			}
			back := reflect.New(reflect.TypeOf(tt.value))
			if err := json.Unmarshal(out, back.Interface()); err != nil {
				t.Fatalf("json.Unmarshal(%s): %v", out, err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), tt.value) {
				t.Fatalf("json.Unmarshal(%s) = %#v, want %#v", out, back.Elem().Interface(), tt.value)
			}
		})
	}
}

func TestUnmarshalJSONRejects(t *testing.T) {
	for _, tt := range []struct {
		in string
		v  any
	}{
		{`"expo"`, &Backoff{}},
		{`{"fixed":{},"linear":{}}`, &Backoff{}},
		{`{"exit_code":[]}`, &Matcher{}},
		{`"batched"`, &ErrorCollection{}},
		{`"10 percent"`, &BudgetValue{}},
		{`2.5`, &BudgetValue{}},
		{`"5 seconds"`, new(Duration)},
		{`30`, new(Duration)},
	} {
		if err := json.Unmarshal([]byte(tt.in), tt.v); err == nil {
			t.Errorf("%T accepted %s", tt.v, tt.in)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"5 seconds"`), &d); !errors.Is(err, ErrBadDuration) {
		t.Errorf("Duration error %v does not wrap ErrBadDuration", err)
	}
}
