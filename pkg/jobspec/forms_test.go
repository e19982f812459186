package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func durp(s string) *messages.Duration { d := messages.MustDuration(s); return &d }

// TestPolymorphicForms decodes every accepted form of the polymorphic types
// through the strict decoder, and checks the canonical form MarshalJSON
// writes, which json.Unmarshal reads back.
func TestPolymorphicForms(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      any // a value of the type
		canonical string
	}{
		{"backoff fixed", `"fixed"`, messages.Backoff{Kind: messages.BackoffFixed}, `"fixed"`},
		{"backoff linear", `"linear"`, messages.Backoff{Kind: messages.BackoffLinear}, `"linear"`},
		{"backoff exponential", `"exponential"`, messages.Backoff{Kind: messages.BackoffExponential}, `"exponential"`},
		{"backoff fibonacci", `"fibonacci"`, messages.Backoff{Kind: messages.BackoffFibonacci}, `"fibonacci"`},
		{"backoff custom", `"custom"`, messages.Backoff{Kind: messages.BackoffCustom}, `"custom"`},
		{"backoff upper case", `"Exponential"`, messages.Backoff{Kind: messages.BackoffExponential}, `"exponential"`},
		{"backoff fixed null", `{"fixed":null}`, messages.Backoff{Kind: messages.BackoffFixed}, `"fixed"`},
		{"backoff fixed empty", `{"fixed":{}}`, messages.Backoff{Kind: messages.BackoffFixed}, `"fixed"`},
		{"backoff fixed delay", `{"fixed":{"delay":"2s"}}`, messages.Backoff{Kind: messages.BackoffFixed, Initial: durp("2s")}, `{"fixed":{"delay":"2s"}}`},
		{"backoff fixed initial", `{"fixed":{"initial":"2s"}}`, messages.Backoff{Kind: messages.BackoffFixed, Initial: durp("2s")}, `{"fixed":{"delay":"2s"}}`},
		{"backoff exponential base", `{"exponential":{"base":3}}`, messages.Backoff{Kind: messages.BackoffExponential, Base: 3}, `{"exponential":{"base":3}}`},
		{"backoff exponential legacy", `{"exponential":{"initial":"1s","multiplier":2}}`, messages.Backoff{Kind: messages.BackoffExponential, Base: 2, Initial: durp("1s")}, `{"exponential":{"base":2,"initial":"1s"}}`},
		{"backoff linear increment", `{"linear":{"increment":"2s"}}`, messages.Backoff{Kind: messages.BackoffLinear, Increment: durp("2s")}, `{"linear":{"increment":"2s"}}`},
		{"backoff linear legacy", `{"linear":{"initial":"1s","increment":"2s"}}`, messages.Backoff{Kind: messages.BackoffLinear, Initial: durp("1s"), Increment: durp("2s")}, `{"linear":{"increment":"2s","initial":"1s"}}`},
		{"backoff fibonacci legacy", `{"fibonacci":{"initial":"1s"}}`, messages.Backoff{Kind: messages.BackoffFibonacci, Initial: durp("1s")}, `{"fibonacci":{"initial":"1s"}}`},
		{"backoff custom delays", `{"custom":{"delays":["1s",{"secs":3,"nanos":0},{"secs":7},"15s"]}}`,
			messages.Backoff{Kind: messages.BackoffCustom, Delays: []messages.Duration{messages.MustDuration("1s"), messages.MustDuration("3s"), messages.MustDuration("7s"), messages.MustDuration("15s")}},
			`{"custom":{"delays":["1s","3s","7s","15s"]}}`},
		{"backoff custom empty", `{"custom":{"delays":[]}}`, messages.Backoff{Kind: messages.BackoffCustom}, `"custom"`},

		{"matcher network", `"network"`, messages.Matcher{Builtin: messages.MatchNetwork}, `"network"`},
		{"matcher timeout", `"timeout"`, messages.Matcher{Builtin: messages.MatchTimeout}, `"timeout"`},
		{"matcher server_error", `"server_error"`, messages.Matcher{Builtin: messages.MatchServerError}, `"server_error"`},
		{"matcher rate_limit", `"RATE_LIMIT"`, messages.Matcher{Builtin: messages.MatchRateLimit}, `"rate_limit"`},
		{"matcher pattern", `{"pattern":"conn.*refused"}`, messages.Matcher{Pattern: "conn.*refused"}, `{"pattern":"conn.*refused"}`},
		{"matcher exit codes", `{"exit_code":[1,2]}`, messages.Matcher{ExitCodes: []int{1, 2}}, `{"exit_code":[1,2]}`},
		{"matcher one exit code", `{"exit_code":137}`, messages.Matcher{ExitCodes: []int{137}}, `{"exit_code":[137]}`},

		{"on_failure stop", `"stop"`, messages.OnFailure{Action: messages.OnFailureStop}, `"stop"`},
		{"on_failure continue", `"continue"`, messages.OnFailure{Action: messages.OnFailureContinue}, `"continue"`},
		{"on_failure fallback", `{"fallback":{"command":"save-to-local.sh"}}`, messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "save-to-local.sh"}, `{"fallback":{"command":"save-to-local.sh"}}`},

		{"item failure dlq", `"dlq"`, messages.ItemFailureAction{Action: messages.ItemFailureDLQ}, `"dlq"`},
		{"item failure retry", `"retry"`, messages.ItemFailureAction{Action: messages.ItemFailureRetry}, `"retry"`},
		{"item failure skip", `"skip"`, messages.ItemFailureAction{Action: messages.ItemFailureSkip}, `"skip"`},
		{"item failure stop", `"stop"`, messages.ItemFailureAction{Action: messages.ItemFailureStop}, `"stop"`},
		{"item failure custom handler", `{"custom":{"handler":"notify","with":{"channel":"ops"}}}`,
			messages.ItemFailureAction{Action: messages.ItemFailureCustom, Custom: &messages.Step{Handler: "notify", With: map[string]any{"channel": "ops"}}},
			`{"custom":{"handler":"notify","with":{"channel":"ops"}}}`},
		{"item failure custom shell", `{"custom":{"shell":"alert ${item_id}"}}`,
			messages.ItemFailureAction{Action: messages.ItemFailureCustom, Custom: &messages.Step{Shell: "alert ${item_id}"}},
			`{"custom":{"shell":"alert ${item_id}"}}`},

		{"collection aggregate", `"aggregate"`, messages.ErrorCollection{Mode: messages.CollectAggregate}, `"aggregate"`},
		{"collection immediate", `"immediate"`, messages.ErrorCollection{Mode: messages.CollectImmediate}, `"immediate"`},
		{"collection batched", `{"batched":{"size":50}}`, messages.ErrorCollection{Mode: messages.CollectBatched, BatchSize: 50}, `{"batched":{"size":50}}`},

		{"budget count", `20`, messages.BudgetValue{Count: 20}, `20`},
		{"budget zero", `0`, messages.BudgetValue{}, `0`},
		{"budget numeric string", `"5"`, messages.BudgetValue{Count: 5}, `5`},
		{"budget percent", `"10%"`, messages.BudgetValue{Percent: 10, IsPercent: true}, `"10%"`},
		{"budget fractional percent", `"12.5 %"`, messages.BudgetValue{Percent: 12.5, IsPercent: true}, `"12.5%"`},
		{"budget integral float", `3.0`, messages.BudgetValue{Count: 3}, `3`},

		{"duration humantime", `"2m30s"`, messages.MustDuration("150s"), `"2m30s"`},
		{"duration secs nanos", `{"secs":1,"nanos":500000000}`, messages.MustDuration("1.5s"), `"1s500ms"`},
		{"duration zero", `0`, messages.Duration(0), `"0s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := reflect.TypeOf(tt.want)
			tr := readTree([]byte(tt.in), true)
			if len(tr.problems) > 0 {
				t.Fatal(tr.problems)
			}
			// Strict decoder.
			d := newDecoder()
			got := reflect.New(typ)
			d.value("x", tr.value, got.Elem())
			if len(d.problems) > 0 {
				t.Fatalf("strict decode: %v", d.problems)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), tt.want) {
				t.Fatalf("strict decode = %#v, want %#v", got.Elem().Interface(), tt.want)
			}
			// The canonical form reads back with json.Unmarshal.
			back := reflect.New(typ)
			if err := json.Unmarshal([]byte(tt.canonical), back.Interface()); err != nil {
				t.Fatalf("json.Unmarshal of the canonical form: %v", err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), tt.want) {
				t.Fatalf("json.Unmarshal = %#v, want %#v", back.Elem().Interface(), tt.want)
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
	  "best_effort":{"min_groups":0,"deadline":"10m","late_results":"update"},
	  "reduce":[{"shell":"agg ${map.results} ${map.total}","retry_config":{"on_failure":{"fallback":{"command":"echo ${map.failed}"}}}}]}`,
	`{"items":[{"id":"a","v":"\u00e9\u2028<"},{"id":"b"},"c",null,[1,2],12345678901234567890123],"agent_template":[{"handler":"h"}],"error_policy":{"on_item_failure":"retry"}}`,
	`{"items":[1,2],"agent_template":[{"shell":"x"}],"error_policy":{},"best_effort":{},"retry_budget":0}`,
}

// TestRoundTrip: parseJSON(json.Marshal(spec)) == spec, for parsed specs
// and for their WithDefaults; the canonical form is a fixed point.
func TestRoundTrip(t *testing.T) {
	design, err := os.ReadFile("testdata/design.json")
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range append([]string{string(design)}, roundTripSpecs...) {
		spec := mustParse(t, in)
		for _, s := range []*messages.JobSpec{spec, WithDefaults(spec)} {
			if err := Validate(s); err != nil {
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
	spec := WithDefaults(mustParse(t, roundTripSpecs[1]))
	spec.AgentTemplate[1].With = map[string]any{"s": "x"} // json.Unmarshal makes float64 numbers
	spec.AgentTemplate[0].Shell = "curl ${item.url}"      // and keeps HTML escapes in raw items
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back messages.JobSpec
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, spec) {
		t.Fatalf("json.Unmarshal differs:\n%+v\n%+v", &back, spec)
	}
}

// TestDurationForms: the forms a spec may write a duration in, and the
// problems of bad ones.
func TestDurationForms(t *testing.T) {
	tests := []struct {
		in      string
		want    messages.Duration
		wantErr string
	}{
		{`"1h30m"`, messages.MustDuration("90m"), ""},
		{`{"secs":3,"nanos":0}`, messages.MustDuration("3s"), ""},
		{`{"secs":1,"nanos":500000000}`, messages.MustDuration("1500ms"), ""},
		{`{"nanos":5}`, 5, ""},
		{`{"secs":2.0}`, messages.MustDuration("2s"), ""},
		{`0`, 0, ""},
		{`{}`, 0, "{secs, nanos} form needs secs"},
		{`{"secs":-1}`, 0, "secs must be >= 0"},
		{`{"secs":1.5}`, 0, "expected an integer, got number 1.5"},
		{`{"secs":"1"}`, 0, `expected an integer, got string "1"`},
		{`{"secs":1e30}`, 0, "number 1e30 is out of range"},
		{`{"secs":9223372036}`, 0, "{secs: 9223372036}: too large"},
		{`{"secs":1,"ms":2}`, 0, `unknown field "ms"`},
		{`30`, 0, `bare number 30: write a string with a unit, e.g. "30s"`},
		{`true`, 0, `want a string such as "30s" or {secs, nanos}, got boolean true`},
		{`"5 seconds"`, 0, `unknown unit "seconds"`},
	}
	for _, tt := range tests {
		tr := readTree([]byte(tt.in), true)
		d, err := duration(tr.value)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, messages.ErrBadDuration) {
				t.Errorf("duration(%s) error = %v, want %q wrapping ErrBadDuration", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || d != tt.want {
			t.Errorf("duration(%s) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
	}
}
