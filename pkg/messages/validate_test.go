package messages

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// validSpec is a minimal valid spec built in code.
func validSpec() *JobSpec {
	return &JobSpec{
		Items:         []json.RawMessage{json.RawMessage(`{"id":"a"}`)},
		AgentTemplate: []Step{{Shell: "true"}},
	}
}

// TestValidateProgrammatic covers the problems only a spec built in code
// can have (the decoders cannot produce these values).
func TestValidateProgrammatic(t *testing.T) {
	neg := Duration(-1)
	tests := []struct {
		name   string
		mutate func(s *JobSpec)
		want   []string
	}{
		{"valid", func(s *JobSpec) {}, nil},
		{"long input reference", func(s *JobSpec) { s.Items, s.Input = nil, "objstore://b/"+strings.Repeat("n", 5000) },
			[]string{"input: is 5013 bytes long, the limit is 1024"}},
		{"long json_path", func(s *JobSpec) { s.Items, s.Input, s.JSONPath = nil, "x.json", "$"+strings.Repeat(".a", 600) },
			[]string{"json_path: is 1201 bytes long, the limit is 1024"}},
		{"negative timeout", func(s *JobSpec) { s.AgentTemplate[0].Timeout = neg }, []string{"agent_template[0].timeout: must not be negative, got -1ns"}},
		{"negative initial", func(s *JobSpec) { s.AgentTemplate[0].RetryConfig = &RetryConfig{InitialDelay: &neg} },
			[]string{"agent_template[0].retry_config.initial_delay: must not be negative, got -1ns"}},
		{"base below 1", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: BackoffExponential, Base: 0.5}}
		}, []string{"agent_template[0].retry_config.backoff.exponential.base: must be a finite number >= 1, got 0.5"}},
		{"base infinite", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: BackoffExponential, Base: math.Inf(1)}}
		}, []string{"agent_template[0].retry_config.backoff.exponential.base: must be a finite number >= 1, got +Inf"}},
		{"base on linear", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: BackoffLinear, Base: 2}}
		}, []string{"agent_template[0].retry_config.backoff.linear: base only applies to exponential backoff"}},
		{"params on the wrong kind", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: BackoffFixed, Increment: durp("1s"), Delays: []Duration{1}}}
		}, []string{
			"agent_template[0].retry_config.backoff.fixed: increment only applies to linear backoff",
			"agent_template[0].retry_config.backoff.fixed: delays only apply to custom backoff",
		}},
		{"custom negative delay and initial", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: BackoffCustom, Delays: []Duration{1, neg}, Initial: durp("1s")}}
		}, []string{
			"agent_template[0].retry_config.backoff.custom.delays[1]: must not be negative, got -1ns",
			"agent_template[0].retry_config.backoff.custom: initial does not apply to custom backoff",
		}},
		{"unknown backoff kind", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{Backoff: &Backoff{Kind: "quadratic"}}
		}, []string{`agent_template[0].retry_config.backoff: unknown backoff strategy "quadratic"`}},
		{"matchers", func(s *JobSpec) {
			s.AgentTemplate[0].RetryConfig = &RetryConfig{RetryOn: []Matcher{{}, {Builtin: "network", Pattern: "x"}, {Builtin: "bogus"}, {ExitCodes: []int{300}}, {Builtin: "Network"}}}
		}, []string{
			"agent_template[0].retry_config.retry_on[0]: empty matcher",
			"agent_template[0].retry_config.retry_on[1]: set only one of a built-in name, pattern or exit_code",
			`agent_template[0].retry_config.retry_on[2]: unknown matcher "bogus"`,
			"agent_template[0].retry_config.retry_on[3].exit_code[0]: must be between 0 and 255, got 300",
		}},
		{"on_failure", func(s *JobSpec) {
			s.AgentTemplate = append(s.AgentTemplate, Step{Shell: "x", RetryConfig: &RetryConfig{OnFailure: &OnFailure{Action: "explode"}}},
				Step{Shell: "x", RetryConfig: &RetryConfig{OnFailure: &OnFailure{Action: OnFailureStop, Fallback: "y"}}})
		}, []string{
			`agent_template[1].retry_config.on_failure: unknown action "explode"`,
			"agent_template[2].retry_config.on_failure: a fallback command only applies to the fallback action",
		}},
		{"item failure actions", func(s *JobSpec) {
			s.ErrorPolicy = &ErrorPolicy{OnItemFailure: &ItemFailureAction{Action: ItemFailureCustom}}
		}, []string{"error_policy.on_item_failure: custom needs a step"}},
		{"step on a non-custom action", func(s *JobSpec) {
			s.ErrorPolicy = &ErrorPolicy{OnItemFailure: &ItemFailureAction{Action: ItemFailureDLQ, Custom: &Step{Shell: "x"}}}
		}, []string{"error_policy.on_item_failure: a step only applies to the custom action"}},
		{"error collection", func(s *JobSpec) {
			s.ErrorPolicy = &ErrorPolicy{ErrorCollection: &ErrorCollection{Mode: CollectAggregate, BatchSize: 3}}
		}, []string{"error_policy.error_collection: a batch size only applies to batched"}},
		{"error collection unknown", func(s *JobSpec) {
			s.ErrorPolicy = &ErrorPolicy{ErrorCollection: &ErrorCollection{}}
		}, []string{`error_policy.error_collection: unknown mode ""`}},
		{"breaker negative, zero is unset", func(s *JobSpec) {
			s.ErrorPolicy = &ErrorPolicy{CircuitBreaker: &CircuitBreakerConfig{FailureThreshold: -1, Timeout: neg}}
		}, []string{
			"error_policy.circuit_breaker.failure_threshold: must be >= 1, got -1",
			"error_policy.circuit_breaker.timeout: must be greater than 0, got -1ns",
		}},
		{"budgets", func(s *JobSpec) {
			s.RetryBudget = &BudgetValue{Count: 2, Percent: 5, IsPercent: true}
			s.RetryBudgetPerItem = &BudgetValue{Percent: 5}
		}, []string{
			"retry_budget: set a count or a percentage, not both",
			"retry_budget_per_item: Percent is set but IsPercent is false",
		}},
		{"budget NaN", func(s *JobSpec) { s.RetryBudget = &BudgetValue{Percent: math.NaN(), IsPercent: true} },
			[]string{"retry_budget: percentage must be between 0% and 100%, got NaN%"}},
		{"best effort", func(s *JobSpec) { s.BestEffort = &BestEffort{MinGroups: -2, Deadline: neg} }, []string{
			"best_effort.min_groups: must be >= 0, got -2",
			"best_effort.deadline: must not be negative, got -1ns",
		}},
		{"item not JSON", func(s *JobSpec) { s.Items = append(s.Items, json.RawMessage(`{`)) }, []string{"items[1]: not valid JSON"}},
		{"both shell and handler, blank shell", func(s *JobSpec) { s.AgentTemplate[0] = Step{Shell: " ", Handler: "h"} }, []string{
			"agent_template[0].shell: must not be empty",
			"agent_template[0]: set only one of shell or handler",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(s)
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			checkProblems(t, err, tt.want)
		})
	}
	var nilSpec *JobSpec
	checkProblems(t, nilSpec.Validate(), []string{"no job spec"})
}

func TestWithDefaults(t *testing.T) {
	spec := mustParse(t, `{"input":"items.json","agent_template":[
		{"shell":"a"},
		{"name":"up","handler":"h","retry_config":{"backoff":{"linear":{"initial":"2s"}},"attempts":5}},
		{"shell":"c","retry_config":{"backoff":{"fixed":{"delay":"5s"}}}}],
		"error_policy":{"on_item_failure":"retry","circuit_breaker":{"timeout":"1m"}},
		"best_effort":{"deadline":"5m"},"reduce":[{"shell":"r"}]}`)
	before, _ := json.Marshal(spec)
	got := spec.WithDefaults()
	after, _ := json.Marshal(spec)
	if string(before) != string(after) {
		t.Fatalf("WithDefaults modified its receiver")
	}
	three, five, jf, yes := 3, 5, 0.3, true
	stop := &OnFailure{Action: OnFailureStop}
	want := &JobSpec{
		Pool: "default", Input: "items.json", JSONPath: "$[*]", IDField: "id",
		AgentTemplate: []Step{
			{Name: "step-1", Shell: "a", RetryConfig: &RetryConfig{Attempts: &three, Backoff: &Backoff{Kind: BackoffExponential, Base: 2},
				InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
			{Name: "up", Handler: "h", RetryConfig: &RetryConfig{Attempts: &five, Backoff: &Backoff{Kind: BackoffLinear, Initial: durp("2s"), Increment: durp("2s")},
				InitialDelay: durp("2s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
			{Name: "step-3", Shell: "c", RetryConfig: &RetryConfig{Attempts: &three, Backoff: &Backoff{Kind: BackoffFixed, Initial: durp("5s")},
				InitialDelay: durp("5s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
		},
		ErrorPolicy: &ErrorPolicy{
			OnItemFailure: &ItemFailureAction{Action: ItemFailureRetry}, ContinueOnFailure: &yes,
			ErrorCollection: &ErrorCollection{Mode: CollectAggregate},
			CircuitBreaker:  &CircuitBreakerConfig{FailureThreshold: 5, SuccessThreshold: 3, Timeout: MustDuration("1m"), HalfOpenRequests: 3},
			RetryConfig: &WorkflowRetryConfig{MaxAttempts: &three, Backoff: &Backoff{Kind: BackoffExponential, Base: 2},
				InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf},
		},
		BestEffort: &BestEffort{MinGroups: 1, Deadline: MustDuration("5m"), LateResults: LateResultsLog},
		Reduce: []Step{{Name: "reduce-1", Shell: "r", RetryConfig: &RetryConfig{Attempts: &three, Backoff: &Backoff{Kind: BackoffExponential, Base: 2},
			InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}}},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("WithDefaults:\n%s\nwant\n%s", g, w)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// Deep copy: changing the copy leaves the original alone.
	got.AgentTemplate[1].RetryConfig.Backoff.Initial = durp("9s")
	*got.AgentTemplate[1].RetryConfig.Attempts = 9
	if *spec.AgentTemplate[1].RetryConfig.Backoff.Initial != MustDuration("2s") || *spec.AgentTemplate[1].RetryConfig.Attempts != 5 {
		t.Fatal("WithDefaults shares memory with its receiver")
	}
	// Inline items get no json_path (it is only allowed with input).
	inline := mustParse(t, withTop(`"id":"x"`)).WithDefaults()
	if inline.JSONPath != "" || inline.Validate() != nil {
		t.Fatalf("inline spec defaults: json_path %q, %v", inline.JSONPath, inline.Validate())
	}
	var nilSpec *JobSpec
	if nilSpec.WithDefaults() != nil {
		t.Fatal("nil.WithDefaults() != nil")
	}
}

func TestClone(t *testing.T) {
	spec := mustParse(t, roundTripSpecs[1])
	c := spec.Clone()
	if !reflect.DeepEqual(c, spec) {
		t.Fatal("Clone differs")
	}
	c.AgentTemplate[1].With["deep"].(map[string]any)["list"].([]any)[0] = "changed"
	c.AgentTemplate[0].RetryConfig.RetryOn[1].ExitCodes[0] = 99
	c.ErrorPolicy.OnItemFailure.Custom.With["to"] = "dev"
	c.Env["A"] = "changed"
	if !reflect.DeepEqual(mustParse(t, roundTripSpecs[1]), spec) {
		t.Fatal("Clone shares memory with the original")
	}
	items := mustParse(t, roundTripSpecs[2])
	ci := items.Clone()
	ci.Items[0][0] = ' '
	if items.Items[0][0] != '{' {
		t.Fatal("Clone shares item bytes")
	}
}

func TestParseRetryConfig(t *testing.T) {
	rc, err := ParseRetryConfig([]byte(`{"attempts":5,"backoff":{"custom":{"delays":["1s",{"secs":3,"nanos":0}]}},"max_delay":"60s"}`))
	if err != nil {
		t.Fatal(err)
	}
	five := 5
	want := &RetryConfig{Attempts: &five, Backoff: &Backoff{Kind: BackoffCustom, Delays: []Duration{MustDuration("1s"), MustDuration("3s")}}, MaxDelay: durp("60s")}
	if !reflect.DeepEqual(rc, want) {
		t.Fatalf("got %+v", rc)
	}
	wrapped, err := ParseRetryConfig([]byte(`{"retry_config":{"attempts":5,"backoff":{"custom":{"delays":["1s","3s"]}},"max_delay":"1m"}}`))
	if err != nil || !reflect.DeepEqual(wrapped, want) {
		t.Fatalf("wrapped: %+v, %v", wrapped, err)
	}

	_, err = ParseRetryConfig([]byte(`{"attempts":0,"backof":"fixed","retry_on":[{"pattern":"("}]}`))
	checkProblems(t, err, []string{
		`backof: unknown field (did you mean "backoff"?)`,
		"attempts: must be between 1 and 10000, got 0",
		"retry_on[0].pattern: invalid regex: missing closing )",
	})
	if !strings.HasPrefix(err.Error(), "invalid retry config: ") {
		t.Errorf("Error() = %q", err)
	}
	_, err = ParseRetryConfig([]byte("{\"retry_config\": {\n  \"initial_delay\": \"1m\"\n}}"))
	checkProblems(t, err, []string{"retry_config.initial_delay (line 2): 1m is greater than max_delay 30s (default)"})

	tree := map[string]any{"attempts": 2.0, "jitter": true}
	rc, err = DecodeRetryConfig(tree)
	if err != nil || *rc.Attempts != 2 || !rc.Jitter {
		t.Fatalf("DecodeRetryConfig: %+v, %v", rc, err)
	}
	def := (*RetryConfig)(nil).WithDefaults()
	if *def.Attempts != DefaultAttempts || def.Backoff.Kind != BackoffExponential || *def.MaxDelay != DefaultMaxDelay || def.Validate() != nil {
		t.Fatalf("default retry config %+v", def)
	}
}

func TestSetLines(t *testing.T) {
	e := &ValidationError{Problems: []FieldError{
		{Field: "b.c[2].d", Message: "deep"},
		{Field: "a", Message: "top"},
		{Field: "", Message: "document"},
		{Field: "zz", Message: "unknown place"},
		{Field: "x", Message: "already", Line: 1},
	}}
	e.SetLines(map[string]int{"a": 2, "b": 5, "b.c[2]": 7})
	got := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		got[i] = p.Error()
	}
	want := []string{"document", "zz: unknown place", "x (line 1): already", "a (line 2): top", "b.c[2].d (line 7): deep"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if (FieldError{Message: "m", Line: 3}).Error() != "line 3: m" {
		t.Error("document-level problem with a line")
	}
}
