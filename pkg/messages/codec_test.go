package messages

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

func durp(s string) *Duration { d := MustDuration(s); return &d }

// TestPolymorphicForms decodes every accepted form of the polymorphic types
// through the strict decoder and through json.Unmarshal, and checks the
// canonical form MarshalJSON writes.
func TestPolymorphicForms(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      any // a value of the type
		canonical string
	}{
		{"backoff fixed", `"fixed"`, Backoff{Kind: BackoffFixed}, `"fixed"`},
		{"backoff linear", `"linear"`, Backoff{Kind: BackoffLinear}, `"linear"`},
		{"backoff exponential", `"exponential"`, Backoff{Kind: BackoffExponential}, `"exponential"`},
		{"backoff fibonacci", `"fibonacci"`, Backoff{Kind: BackoffFibonacci}, `"fibonacci"`},
		{"backoff custom", `"custom"`, Backoff{Kind: BackoffCustom}, `"custom"`},
		{"backoff upper case", `"Exponential"`, Backoff{Kind: BackoffExponential}, `"exponential"`},
		{"backoff fixed null", `{"fixed":null}`, Backoff{Kind: BackoffFixed}, `"fixed"`},
		{"backoff fixed empty", `{"fixed":{}}`, Backoff{Kind: BackoffFixed}, `"fixed"`},
		{"backoff fixed delay", `{"fixed":{"delay":"2s"}}`, Backoff{Kind: BackoffFixed, Initial: durp("2s")}, `{"fixed":{"delay":"2s"}}`},
		{"backoff fixed initial", `{"fixed":{"initial":"2s"}}`, Backoff{Kind: BackoffFixed, Initial: durp("2s")}, `{"fixed":{"delay":"2s"}}`},
		{"backoff exponential base", `{"exponential":{"base":3}}`, Backoff{Kind: BackoffExponential, Base: 3}, `{"exponential":{"base":3}}`},
		{"backoff exponential legacy", `{"exponential":{"initial":"1s","multiplier":2}}`, Backoff{Kind: BackoffExponential, Base: 2, Initial: durp("1s")}, `{"exponential":{"base":2,"initial":"1s"}}`},
		{"backoff linear increment", `{"linear":{"increment":"2s"}}`, Backoff{Kind: BackoffLinear, Increment: durp("2s")}, `{"linear":{"increment":"2s"}}`},
		{"backoff linear legacy", `{"linear":{"initial":"1s","increment":"2s"}}`, Backoff{Kind: BackoffLinear, Initial: durp("1s"), Increment: durp("2s")}, `{"linear":{"increment":"2s","initial":"1s"}}`},
		{"backoff fibonacci legacy", `{"fibonacci":{"initial":"1s"}}`, Backoff{Kind: BackoffFibonacci, Initial: durp("1s")}, `{"fibonacci":{"initial":"1s"}}`},
		{"backoff custom delays", `{"custom":{"delays":["1s",{"secs":3,"nanos":0},{"secs":7},"15s"]}}`,
			Backoff{Kind: BackoffCustom, Delays: []Duration{MustDuration("1s"), MustDuration("3s"), MustDuration("7s"), MustDuration("15s")}},
			`{"custom":{"delays":["1s","3s","7s","15s"]}}`},
		{"backoff custom empty", `{"custom":{"delays":[]}}`, Backoff{Kind: BackoffCustom}, `"custom"`},

		{"matcher network", `"network"`, Matcher{Builtin: MatchNetwork}, `"network"`},
		{"matcher timeout", `"timeout"`, Matcher{Builtin: MatchTimeout}, `"timeout"`},
		{"matcher server_error", `"server_error"`, Matcher{Builtin: MatchServerError}, `"server_error"`},
		{"matcher rate_limit", `"RATE_LIMIT"`, Matcher{Builtin: MatchRateLimit}, `"rate_limit"`},
		{"matcher pattern", `{"pattern":"conn.*refused"}`, Matcher{Pattern: "conn.*refused"}, `{"pattern":"conn.*refused"}`},
		{"matcher exit codes", `{"exit_code":[1,2]}`, Matcher{ExitCodes: []int{1, 2}}, `{"exit_code":[1,2]}`},
		{"matcher one exit code", `{"exit_code":137}`, Matcher{ExitCodes: []int{137}}, `{"exit_code":[137]}`},

		{"on_failure stop", `"stop"`, OnFailure{Action: OnFailureStop}, `"stop"`},
		{"on_failure continue", `"continue"`, OnFailure{Action: OnFailureContinue}, `"continue"`},
		{"on_failure fallback", `{"fallback":{"command":"save-to-local.sh"}}`, OnFailure{Action: OnFailureFallback, Fallback: "save-to-local.sh"}, `{"fallback":{"command":"save-to-local.sh"}}`},

		{"item failure dlq", `"dlq"`, ItemFailureAction{Action: ItemFailureDLQ}, `"dlq"`},
		{"item failure retry", `"retry"`, ItemFailureAction{Action: ItemFailureRetry}, `"retry"`},
		{"item failure skip", `"skip"`, ItemFailureAction{Action: ItemFailureSkip}, `"skip"`},
		{"item failure stop", `"stop"`, ItemFailureAction{Action: ItemFailureStop}, `"stop"`},
		{"item failure custom handler", `{"custom":{"handler":"notify","with":{"channel":"ops"}}}`,
			ItemFailureAction{Action: ItemFailureCustom, Custom: &Step{Handler: "notify", With: map[string]any{"channel": "ops"}}},
			`{"custom":{"handler":"notify","with":{"channel":"ops"}}}`},
		{"item failure custom shell", `{"custom":{"shell":"alert ${item_id}"}}`,
			ItemFailureAction{Action: ItemFailureCustom, Custom: &Step{Shell: "alert ${item_id}"}},
			`{"custom":{"shell":"alert ${item_id}"}}`},

		{"collection aggregate", `"aggregate"`, ErrorCollection{Mode: CollectAggregate}, `"aggregate"`},
		{"collection immediate", `"immediate"`, ErrorCollection{Mode: CollectImmediate}, `"immediate"`},
		{"collection batched", `{"batched":{"size":50}}`, ErrorCollection{Mode: CollectBatched, BatchSize: 50}, `{"batched":{"size":50}}`},

		{"budget count", `20`, BudgetValue{Count: 20}, `20`},
		{"budget zero", `0`, BudgetValue{}, `0`},
		{"budget numeric string", `"5"`, BudgetValue{Count: 5}, `5`},
		{"budget percent", `"10%"`, BudgetValue{Percent: 10, IsPercent: true}, `"10%"`},
		{"budget fractional percent", `"12.5 %"`, BudgetValue{Percent: 12.5, IsPercent: true}, `"12.5%"`},
		{"budget integral float", `3.0`, BudgetValue{Count: 3}, `3`},

		{"duration humantime", `"2m30s"`, MustDuration("150s"), `"2m30s"`},
		{"duration secs nanos", `{"secs":1,"nanos":500000000}`, MustDuration("1.5s"), `"1s500ms"`},
		{"duration zero", `0`, Duration(0), `"0s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := reflect.TypeOf(tt.want)
			var tree any
			if err := json.Unmarshal([]byte(tt.in), &tree); err != nil {
				t.Fatal(err)
			}
			// Strict decoder.
			d := newDecoder()
			got := reflect.New(typ)
			d.value("x", tree, got.Elem())
			if err := d.err(); err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), tt.want) {
				t.Fatalf("strict decode = %#v, want %#v", got.Elem().Interface(), tt.want)
			}
			// json.Unmarshal (UnmarshalJSON).
			got2 := reflect.New(typ)
			if err := json.Unmarshal([]byte(tt.in), got2.Interface()); err != nil {
				t.Fatalf("json.Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got2.Elem().Interface(), tt.want) {
				t.Fatalf("json.Unmarshal = %#v, want %#v", got2.Elem().Interface(), tt.want)
			}
			// Canonical form.
			out, err := json.Marshal(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.canonical {
				t.Errorf("MarshalJSON = %s, want %s", out, tt.canonical)
			}
		})
	}
}

func TestUnmarshalJSONRejects(t *testing.T) {
	var b Backoff
	if err := json.Unmarshal([]byte(`"expo"`), &b); err == nil {
		t.Error("Backoff accepted \"expo\"")
	}
	var m Matcher
	if err := json.Unmarshal([]byte(`{"exit_code":[]}`), &m); err == nil {
		t.Error("Matcher accepted an empty exit_code list")
	}
	var c ErrorCollection
	if err := json.Unmarshal([]byte(`"batched"`), &c); err == nil {
		t.Error(`ErrorCollection accepted "batched" without a size`)
	}
}

// roundTripSpecs are valid specs covering every field and form.
var roundTripSpecs = []string{
	`{"items":[1],"agent_template":[{"shell":"true"}]}`,
	`{"id":"j1","name":"n","pool":"gpu","group_by":"${item.region}-${item_id}","input":"objstore://inputs/items.json","json_path":"$.items[*]","id_field":"key",
	  "max_parallel":3,"env":{"A":"1","B_2":"x y"},
	  "agent_template":[
	    {"name":"fetch","shell":"curl ${item.url} # <&>","timeout":"1m30s","retry_config":{"attempts":10,"backoff":{"linear":{"initial":"1s","increment":"2s"}},
	      "max_delay":"1h","jitter":true,"jitter_factor":0,"jitter_mode":"decorrelated","retry_on":["rate_limit",{"exit_code":[1,2,255]},{"pattern":"(?i)temporar(y|ily)"}],
	      "retry_budget":{"secs":300,"nanos":1},"on_failure":{"fallback":{"command":"save ${item_id}"}}}},
	    {"handler":"h","with":{"n":1.0,"deep":{"list":[1,"two",null,true,{"x":-0.5e10}]},"empty":{}},"retry_config":{"backoff":{"custom":{"delays":["500ms",{"secs":3,"nanos":0},"1d"]}},"max_delay":"2d","on_failure":"continue"}},
	    {"shell":"x","retry_config":{"backoff":{"fixed":{"delay":"250ms"}},"initial_delay":"0","max_delay":"1s"}},
	    {"shell":"y","retry_config":{"backoff":{"fibonacci":{"initial":"100ms"}},"attempts":1}},
	    {"shell":"z","retry_config":{"backoff":{"exponential":{"base":1.5}},"initial_delay":"10ms"}}
	  ],
	  "error_policy":{"on_item_failure":{"custom":{"handler":"notify","with":{"to":"ops"},"timeout":"5s"}},"continue_on_failure":false,"max_failures":1,
	    "failure_threshold":1,"error_collection":{"batched":{"size":10}},"circuit_breaker":{"failure_threshold":1,"timeout":"1s"},
	    "retry_config":{"max_attempts":2,"backoff":"fibonacci","initial_delay":"2s","max_delay":"1m","jitter":true,"jitter_factor":0.1}},
	  "retry_budget":"12.5%","retry_budget_per_item":"0",
	  "best_effort":{"min_groups":0,"deadline":"0s","late_results":"update"},
	  "reduce":[{"shell":"agg ${map.results} ${map.total}","retry_config":{"on_failure":{"fallback":{"command":"echo ${map.failed}"}}}}]}`,
	`{"items":[{"id":"a","v":"\u00e9\u2028<"},{"id":"b"},"c",null,[1,2],12345678901234567890123],"agent_template":[{"handler":"h"}],"error_policy":{"on_item_failure":"retry"}}`,
	`{"items":[1,2],"agent_template":[{"shell":"x"}],"error_policy":{},"best_effort":{},"retry_budget":0}`,
}

// TestRoundTrip: ParseJobSpec(json.Marshal(spec)) == spec, for parsed specs
// and for their WithDefaults; the canonical form is a fixed point.
func TestRoundTrip(t *testing.T) {
	design, err := os.ReadFile("testdata/design.json")
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range append([]string{string(design)}, roundTripSpecs...) {
		spec := mustParse(t, in)
		for _, s := range []*JobSpec{spec, spec.WithDefaults()} {
			if err := s.Validate(); err != nil {
				t.Fatalf("spec %d: Validate: %v", i, err)
			}
			out, err := json.Marshal(s)
			if err != nil {
				t.Fatalf("spec %d: Marshal: %v", i, err)
			}
			back := mustParse(t, string(out))
			if !reflect.DeepEqual(back, s) {
				t.Fatalf("spec %d: round trip differs\n in: %s\nout: %+v", i, out, back)
			}
			out2, _ := json.Marshal(back)
			if string(out2) != string(out) {
				t.Fatalf("spec %d: canonical form is not a fixed point:\n%s\n%s", i, out, out2)
			}
		}
	}
}

// TestStdlibUnmarshal: a spec written with json.Marshal (as the coordinator
// stores it) reads back with plain json.Unmarshal.
func TestStdlibUnmarshal(t *testing.T) {
	spec := mustParse(t, roundTripSpecs[1]).WithDefaults()
	spec.AgentTemplate[1].With = map[string]any{"s": "x"} // json.Unmarshal makes float64 numbers
	spec.AgentTemplate[0].Shell = "curl ${item.url}"      // and keeps HTML escapes in raw items
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back JobSpec
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, spec) {
		t.Fatalf("json.Unmarshal differs:\n%+v\n%+v", &back, spec)
	}
}
