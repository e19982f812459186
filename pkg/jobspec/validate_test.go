package jobspec

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// validSpec is a minimal valid spec built in code.
func validSpec() *messages.JobSpec {
	return &messages.JobSpec{
		Items:         []json.RawMessage{json.RawMessage(`{"id":"a"}`)},
		AgentTemplate: []messages.Step{{Shell: "true"}},
	}
}

// TestValidateProgrammatic covers the problems only a spec built in code
// can have (the decoders cannot produce these values).
func TestValidateProgrammatic(t *testing.T) {
	neg := messages.Duration(-1)
	tests := []struct {
		name   string
		mutate func(s *messages.JobSpec)
		want   []string
	}{
		{"valid", func(s *messages.JobSpec) {}, nil},
		{"long input reference", func(s *messages.JobSpec) { s.Items, s.Input = nil, "objstore://b/"+strings.Repeat("n", 5000) },
			[]string{"input: is 5013 bytes long, the limit is 1024"}},
		{"long json_path", func(s *messages.JobSpec) { s.Items, s.Input, s.JSONPath = nil, "x.json", "$"+strings.Repeat(".a", 600) },
			[]string{"json_path: is 1201 bytes long, the limit is 1024"}},
		{"negative timeout", func(s *messages.JobSpec) { s.AgentTemplate[0].Timeout = neg }, []string{"agent_template[0].timeout: must not be negative, got -1ns"}},
		{"negative initial", func(s *messages.JobSpec) { s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{InitialDelay: &neg} },
			[]string{"agent_template[0].retry_config.initial_delay: must not be negative, got -1ns"}},
		{"base below 1", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 0.5}}
		}, []string{"agent_template[0].retry_config.backoff.exponential.base: must be a finite number >= 1, got 0.5"}},
		{"base infinite", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: math.Inf(1)}}
		}, []string{"agent_template[0].retry_config.backoff.exponential.base: must be a finite number >= 1, got +Inf"}},
		{"base on linear", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffLinear, Base: 2}}
		}, []string{"agent_template[0].retry_config.backoff.linear: base only applies to exponential backoff"}},
		{"params on the wrong kind", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffFixed, Increment: durp("1s"), Delays: []messages.Duration{1}}}
		}, []string{
			"agent_template[0].retry_config.backoff.fixed: increment only applies to linear backoff",
			"agent_template[0].retry_config.backoff.fixed: delays only apply to custom backoff",
		}},
		{"custom negative delay and initial", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffCustom, Delays: []messages.Duration{1, neg}, Initial: durp("1s")}}
		}, []string{
			"agent_template[0].retry_config.backoff.custom.delays[1]: must not be negative, got -1ns",
			"agent_template[0].retry_config.backoff.custom: initial does not apply to custom backoff",
		}},
		{"unknown backoff kind", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{Backoff: &messages.Backoff{Kind: "quadratic"}}
		}, []string{`agent_template[0].retry_config.backoff: unknown backoff strategy "quadratic"`}},
		{"matchers", func(s *messages.JobSpec) {
			s.AgentTemplate[0].RetryConfig = &messages.RetryConfig{RetryOn: []messages.Matcher{{}, {Builtin: "network", Pattern: "x"}, {Builtin: "bogus"}, {ExitCodes: []int{300}}, {Builtin: "Network"}}}
		}, []string{
			"agent_template[0].retry_config.retry_on[0]: empty matcher",
			"agent_template[0].retry_config.retry_on[1]: set only one of a built-in name, pattern or exit_code",
			`agent_template[0].retry_config.retry_on[2]: unknown matcher "bogus"`,
			"agent_template[0].retry_config.retry_on[3].exit_code[0]: must be between 0 and 255, got 300",
		}},
		{"on_failure", func(s *messages.JobSpec) {
			s.AgentTemplate = append(s.AgentTemplate, messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{Action: "explode"}}},
				messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{Action: messages.OnFailureStop, Fallback: "y"}}})
		}, []string{
			`agent_template[1].retry_config.on_failure: unknown action "explode"`,
			"agent_template[2].retry_config.on_failure: a fallback command only applies to the fallback action",
		}},
		{"item failure actions", func(s *messages.JobSpec) {
			s.ErrorPolicy = &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureCustom}}
		}, []string{"error_policy.on_item_failure: custom needs a step"}},
		{"step on a non-custom action", func(s *messages.JobSpec) {
			s.ErrorPolicy = &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureDLQ, Custom: &messages.Step{Shell: "x"}}}
		}, []string{"error_policy.on_item_failure: a step only applies to the custom action"}},
		{"error collection", func(s *messages.JobSpec) {
			s.ErrorPolicy = &messages.ErrorPolicy{ErrorCollection: &messages.ErrorCollection{Mode: messages.CollectAggregate, BatchSize: 3}}
		}, []string{"error_policy.error_collection: a batch size only applies to batched"}},
		{"error collection unknown", func(s *messages.JobSpec) {
			s.ErrorPolicy = &messages.ErrorPolicy{ErrorCollection: &messages.ErrorCollection{}}
		}, []string{`error_policy.error_collection: unknown mode ""`}},
		{"breaker negative, zero is unset", func(s *messages.JobSpec) {
			s.ErrorPolicy = &messages.ErrorPolicy{CircuitBreaker: &messages.CircuitBreakerConfig{FailureThreshold: -1, Timeout: neg}}
		}, []string{
			"error_policy.circuit_breaker.failure_threshold: must be >= 1, got -1",
			"error_policy.circuit_breaker.timeout: must be greater than 0, got -1ns",
		}},
		{"budgets", func(s *messages.JobSpec) {
			s.RetryBudget = &messages.BudgetValue{Count: 2, Percent: 5, IsPercent: true}
			s.RetryBudgetPerItem = &messages.BudgetValue{Percent: 5}
		}, []string{
			"retry_budget: set a count or a percentage, not both",
			"retry_budget_per_item: Percent is set but IsPercent is false",
		}},
		{"budget NaN", func(s *messages.JobSpec) { s.RetryBudget = &messages.BudgetValue{Percent: math.NaN(), IsPercent: true} },
			[]string{"retry_budget: percentage must be between 0% and 100%, got NaN%"}},
		{"best effort", func(s *messages.JobSpec) { s.BestEffort = &messages.BestEffort{MinGroups: -2, Deadline: neg} }, []string{
			"best_effort.min_groups: must be >= 0, got -2",
			"best_effort.deadline: must not be negative, got -1ns",
		}},
		{"item not JSON", func(s *messages.JobSpec) { s.Items = append(s.Items, json.RawMessage(`{`)) }, []string{"items[1]: not valid JSON"}},
		{"both shell and handler, blank shell", func(s *messages.JobSpec) { s.AgentTemplate[0] = messages.Step{Shell: " ", Handler: "h"} }, []string{
			"agent_template[0].shell: must not be empty",
			"agent_template[0]: set only one of shell or handler",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(s)
			err := Validate(s)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			requirePrefixes(t, err, tt.want)
		})
	}
	var nilSpec *messages.JobSpec
	requirePrefixes(t, Validate(nilSpec), []string{"no job spec"})
}

func TestWithDefaults(t *testing.T) {
	spec := mustParse(t, `{"input":"items.json","agent_template":[
		{"shell":"a"},
		{"name":"up","handler":"h","retry_config":{"backoff":{"linear":{"initial":"2s"}},"attempts":5}},
		{"shell":"c","retry_config":{"backoff":{"fixed":{"delay":"5s"}}}}],
		"error_policy":{"on_item_failure":"retry","circuit_breaker":{"timeout":"1m"}},
		"best_effort":{"deadline":"5m"},"reduce":[{"shell":"r"}]}`)
	before, _ := json.Marshal(spec)
	got := WithDefaults(spec)
	after, _ := json.Marshal(spec)
	if string(before) != string(after) {
		t.Fatalf("WithDefaults modified its receiver")
	}
	three, five, jf, yes := 3, 5, 0.3, true
	stop := &messages.OnFailure{Action: messages.OnFailureStop}
	want := &messages.JobSpec{
		Pool: "default", Input: "items.json", JSONPath: "$[*]", IDField: "id",
		AgentTemplate: []messages.Step{
			{Name: "step-1", Shell: "a", RetryConfig: &messages.RetryConfig{Attempts: &three, Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 2},
				InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
			{Name: "up", Handler: "h", RetryConfig: &messages.RetryConfig{Attempts: &five, Backoff: &messages.Backoff{Kind: messages.BackoffLinear, Initial: durp("2s"), Increment: durp("2s")},
				InitialDelay: durp("2s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
			{Name: "step-3", Shell: "c", RetryConfig: &messages.RetryConfig{Attempts: &three, Backoff: &messages.Backoff{Kind: messages.BackoffFixed, Initial: durp("5s")},
				InitialDelay: durp("5s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}},
		},
		ErrorPolicy: &messages.ErrorPolicy{
			OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureRetry}, ContinueOnFailure: &yes,
			ErrorCollection: &messages.ErrorCollection{Mode: messages.CollectAggregate},
			CircuitBreaker:  &messages.CircuitBreakerConfig{FailureThreshold: 5, SuccessThreshold: 3, Timeout: messages.MustDuration("1m"), HalfOpenRequests: 3},
			RetryConfig: &messages.WorkflowRetryConfig{MaxAttempts: &three, Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 2},
				InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf},
		},
		BestEffort: &messages.BestEffort{MinGroups: 1, Deadline: messages.MustDuration("5m"), LateResults: messages.LateResultsLog},
		Reduce: []messages.Step{{Name: "reduce-1", Shell: "r", RetryConfig: &messages.RetryConfig{Attempts: &three, Backoff: &messages.Backoff{Kind: messages.BackoffExponential, Base: 2},
			InitialDelay: durp("1s"), MaxDelay: durp("30s"), JitterFactor: &jf, OnFailure: stop}}},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("WithDefaults:\n%s\nwant\n%s", g, w)
	}
	if err := Validate(got); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// Deep copy: changing the copy leaves the original alone.
	got.AgentTemplate[1].RetryConfig.Backoff.Initial = durp("9s")
	*got.AgentTemplate[1].RetryConfig.Attempts = 9
	if *spec.AgentTemplate[1].RetryConfig.Backoff.Initial != messages.MustDuration("2s") || *spec.AgentTemplate[1].RetryConfig.Attempts != 5 {
		t.Fatal("WithDefaults shares memory with its receiver")
	}
	// Inline items get no json_path (it is only allowed with input).
	inline := WithDefaults(mustParse(t, withTop(`"id":"x"`)))
	if inline.JSONPath != "" || Validate(inline) != nil {
		t.Fatalf("inline spec defaults: json_path %q, %v", inline.JSONPath, Validate(inline))
	}
	var nilSpec *messages.JobSpec
	if WithDefaults(nilSpec) != nil {
		t.Fatal("WithDefaults(nil) != nil")
	}
}

func TestClone(t *testing.T) {
	spec := mustParse(t, roundTripSpecs[1])
	c := deepCopy(spec)
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
	ci := deepCopy(items)
	ci.Items[0][0] = ' '
	if items.Items[0][0] != '{' {
		t.Fatal("Clone shares item bytes")
	}
}

func TestParseRetryConfigJSON(t *testing.T) {
	rc, err := ParseRetryConfig([]byte(`{"attempts":5,"backoff":{"custom":{"delays":["1s",{"secs":3,"nanos":0}]}},"max_delay":"60s"}`))
	if err != nil {
		t.Fatal(err)
	}
	five := 5
	want := &messages.RetryConfig{Attempts: &five, Backoff: &messages.Backoff{Kind: messages.BackoffCustom, Delays: []messages.Duration{messages.MustDuration("1s"), messages.MustDuration("3s")}}, MaxDelay: durp("60s")}
	if !reflect.DeepEqual(rc, want) {
		t.Fatalf("got %+v", rc)
	}
	wrapped, err := ParseRetryConfig([]byte(`{"retry_config":{"attempts":5,"backoff":{"custom":{"delays":["1s","3s"]}},"max_delay":"1m"}}`))
	if err != nil || !reflect.DeepEqual(wrapped, want) {
		t.Fatalf("wrapped: %+v, %v", wrapped, err)
	}

	_, err = ParseRetryConfig([]byte(`{"attempts":0,"backof":"fixed","retry_on":[{"pattern":"("}]}`))
	requirePrefixes(t, err, []string{
		`backof: unknown field (did you mean "backoff"?)`,
		"attempts: must be between 1 and 10000, got 0",
		"retry_on[0].pattern: invalid regex: missing closing )",
	})
	if !strings.HasPrefix(err.Error(), "invalid retry config: ") {
		t.Errorf("Error() = %q", err)
	}
	capped, err := ParseRetryConfig([]byte("{\"retry_config\": {\n  \"initial_delay\": \"1m\"\n}}"))
	if err != nil || *capped.InitialDelay != messages.MustDuration("1m") {
		t.Fatalf("initial_delay above the default max_delay: %+v, %v (want it accepted, capped)", capped, err)
	}

	def := RetryConfigWithDefaults(nil)
	if *def.Attempts != messages.DefaultAttempts || def.Backoff.Kind != messages.BackoffExponential || *def.MaxDelay != messages.DefaultMaxDelay || ValidateRetryConfig(def) != nil {
		t.Fatalf("default retry config %+v", def)
	}
}

func TestSetLines(t *testing.T) {
	problems := []messages.FieldError{
		{Field: "b.c[2].d", Message: "deep"},
		{Field: "a", Message: "top"},
		{Field: "", Message: "document"},
		{Field: "zz", Message: "unknown place"},
		{Field: "x", Message: "already", Line: 1},
	}
	setLines(problems, map[string]int{"a": 2, "b": 5, "b.c[2]": 7})
	got := make([]string, len(problems))
	for i, p := range problems {
		got[i] = p.Error()
	}
	want := []string{"document", "zz: unknown place", "x (line 1): already", "a (line 2): top", "b.c[2].d (line 7): deep"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if (messages.FieldError{Message: "m", Line: 3}).Error() != "line 3: m" {
		t.Error("document-level problem with a line")
	}
}

// An initial delay above max_delay is accepted and capped (docs/contract.md
// §4); Warnings says so, with the field and its line. A spec with problems
// has no warnings: Parse reports the problems.
func TestWarningsInitialDelayAboveMaxDelay(t *testing.T) {
	spec := `id: capped
items: [1]
agent_template:
  - shell: "true"
    retry_config:
      initial_delay: 1m
  - shell: "true"
    retry_config: {max_delay: 500ms}
  - shell: "true"
    retry_config: {initial_delay: 10s, max_delay: 5s}
  - shell: "true"
    retry_config: {backoff: {fixed: {delay: 1m}}}
  - shell: "true"
    retry_config: {initial_delay: 1m, backoff: {custom: {delays: [1s]}}}
error_policy:
  retry_config: {backoff: {exponential: {initial: 1m, multiplier: 2}}}
`
	if _, err := Parse([]byte(spec)); err != nil {
		t.Fatalf("want it accepted, capped: %v", err)
	}
	var got []string
	for _, w := range Warnings([]byte(spec)) {
		got = append(got, w.Error())
	}
	want := []string{
		"agent_template[0].retry_config.initial_delay (line 6): 1m is greater than max_delay 30s (default): every delay is capped at 30s",
		"agent_template[1].retry_config.max_delay (line 8): 500ms is less than initial_delay 1s (default): every delay is capped at 500ms",
		"agent_template[2].retry_config.initial_delay (line 10): 10s is greater than max_delay 5s: every delay is capped at 5s",
		"agent_template[3].retry_config.backoff.fixed.delay (line 12): 1m is greater than max_delay 30s (default): every delay is capped at 30s",
		"error_policy.retry_config.backoff.exponential.initial (line 16): 1m is greater than max_delay 30s (default): every delay is capped at 30s",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("warnings:\n got %q\nwant %q", got, want)
	}
	if w := Warnings([]byte("items: [1]\nagent_template: [{shell: x, retry_config: {initial_delay: 1m, attempts: 0}}]\n")); w != nil {
		t.Fatalf("warnings of an invalid spec: %v", w)
	}
}

// AD-44's names of the late-result policies are accepted and recorded as
// ours: log_only is log, update_result is update.
func TestLateResultsAD44Names(t *testing.T) {
	for in, want := range map[string]string{"log_only": "log", "update_result": "update", "log": "log", "update": "update", "": "log"} {
		spec, err := Parse([]byte(`{"items":[1],"agent_template":[{"shell":"x"}],"best_effort":{"late_results":"` + in + `"}}`))
		if in == "" {
			spec, err = Parse([]byte(`{"items":[1],"agent_template":[{"shell":"x"}],"best_effort":{}}`))
		}
		if err != nil {
			t.Fatalf("late_results %q: %v", in, err)
		}
		if got := WithDefaults(spec).BestEffort.LateResults; got != want {
			t.Errorf("late_results %q recorded as %q, want %q", in, got, want)
		}
	}
}

// agent_timeout and a step's own circuit_breaker (the source documents'
// overall timeout and per-executor breaker) are accepted, and the step's
// breaker gets the job breaker's defaults.
func TestAgentTimeoutAndStepBreaker(t *testing.T) {
	spec, err := Parse([]byte(`items: [1]
agent_timeout: 5m
agent_template:
  - shell: "upload.sh"
    retry_config:
      circuit_breaker: {failure_threshold: 2}
      on_failure: {fallback: {command: "save-local.sh"}}
  - shell: "notify.sh"
`))
	if err != nil {
		t.Fatal(err)
	}
	if spec.AgentTimeout != messages.MustDuration("5m") {
		t.Fatalf("agent_timeout %s", spec.AgentTimeout)
	}
	eff := WithDefaults(spec)
	want := messages.CircuitBreakerConfig{FailureThreshold: 2, SuccessThreshold: 3, Timeout: messages.MustDuration("30s"), HalfOpenRequests: 3}
	if cb := eff.AgentTemplate[0].RetryConfig.CircuitBreaker; cb == nil || *cb != want {
		t.Fatalf("step breaker with defaults: %+v", cb)
	}
	if cb := eff.AgentTemplate[1].RetryConfig.CircuitBreaker; cb != nil {
		t.Fatalf("a step without a breaker got one: %+v", cb)
	}
	if err := Validate(eff); err != nil {
		t.Fatalf("the spec as accepted: %v", err)
	}
}
