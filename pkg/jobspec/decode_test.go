package jobspec

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// parseJSON reads a JSON-only document, as ParseFile reads a .json file.
func parseJSON(data []byte) (*messages.JobSpec, error) { return parseSpec(data, true) }

func mustParse(t *testing.T, s string) *messages.JobSpec {
	t.Helper()
	spec, err := parseJSON([]byte(s))
	if err != nil {
		t.Fatalf("parseJSON(%s): %v", s, err)
	}
	return spec
}

// withTop is a valid minimal spec plus top-level fields.
func withTop(fields string) string {
	return `{"items":[1],"agent_template":[{"shell":"true"}],` + fields + `}`
}

// withStep is a spec whose only step is step.
func withStep(step string) string {
	return `{"items":[1],"agent_template":[` + step + `]}`
}

// withRetry is a spec whose step has the given retry_config body.
func withRetry(rc string) string {
	return withStep(`{"shell":"true","retry_config":{` + rc + `}}`)
}

func withPolicy(ep string) string {
	return withTop(`"error_policy":{` + ep + `}`)
}

func TestParseJSONRejects(t *testing.T) {
	const rc = "agent_template[0].retry_config."
	tests := []struct {
		name string
		in   string
		want []string // each problem, "field: message" prefix, in order
	}{
		// Document shape.
		{"empty document", ``, []string{"empty document"}},
		{"syntax error", `{"items": [1,}`, []string{"invalid JSON at line 1, column 14: invalid character '}'"}},
		{"truncated", `{"items":`, []string{"invalid JSON at line 1, column 10: unexpected end of input"}},
		{"trailing data", `{} {}`, []string{"invalid JSON at line 1, column 4: unexpected data after the top-level value"}},
		{"not an object", `[1]`, []string{"expected an object, got array"}},
		{"null document", `null`, []string{"expected an object, got null"}},
		{"duplicate key", `{"items":[1],"items":[2],"agent_template":[{"shell":"x"}]}`, []string{"items: duplicate key"}},

		// Unknown fields, with suggestions.
		{"unknown field", withTop(`"nmae":"x"`), []string{`nmae: unknown field (did you mean "name"?)`}},
		{"unknown field no suggestion", withTop(`"zzz":1`), []string{`zzz: unknown field`}},
		{"unknown nested field", withStep(`{"shell":"x","retyr_config":{}}`), []string{`agent_template[0].retyr_config: unknown field (did you mean "retry_config"?)`}},
		{"camelCase field", withStep(`{"shell":"x","retryConfig":{}}`), []string{`agent_template[0].retryConfig: unknown field (did you mean "retry_config"?)`}},
		{"field of a nested struct", withStep(`{"shell":"x","attempts":3}`), []string{`agent_template[0].attempts: unknown field (did you mean "retry_config.attempts"?)`}},
		{"misspelt shell is not also missing", withStep(`{"shel":"x"}`), []string{`agent_template[0].shel: unknown field (did you mean "shell"?)`}},
		{"unknown backoff param", withRetry(`"backoff":{"exponential":{"bsae":3}}`), []string{rc + `backoff.exponential.bsae: unknown field (did you mean "base"?)`}},

		// Wrong JSON types name the expected type.
		{"string for int", withTop(`"max_parallel":"3"`), []string{`max_parallel: expected an integer, got string "3"`}},
		{"fraction for int", withRetry(`"attempts":1.5`), []string{rc + `attempts: expected an integer, got number 1.5`}},
		{"number for string", withTop(`"name":5`), []string{`name: expected a string, got number 5 (quote it in YAML)`}},
		{"object for array", withTop(`"reduce":{}`), []string{`reduce: expected an array, got object`}},
		{"string for steps", `{"items":[1],"agent_template":"echo"}`, []string{`agent_template: expected an array, got string "echo"`}},
		{"string for bool", withRetry(`"jitter":"yes"`), []string{rc + `jitter: expected a boolean (true or false), got string "yes"`}},
		{"string for float", withRetry(`"jitter_factor":"0.3"`), []string{rc + `jitter_factor: expected a number, got string "0.3"`}},
		{"array for object", withStep(`{"shell":"x","retry_config":[]}`), []string{`agent_template[0].retry_config: expected an object, got array`}},
		{"null step", withStep(`null`), []string{`agent_template[0]: expected an object, got null`}},
		{"env value not a string", withTop(`"env":{"DEBUG":true}`), []string{`env.DEBUG: expected a string, got boolean true (quote it in YAML)`}},

		// Durations.
		{"duration words", withStep(`{"shell":"x","timeout":"5 seconds"}`), []string{`agent_template[0].timeout: invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`}},
		{"duration bare number", withStep(`{"shell":"x","timeout":30}`), []string{`agent_template[0].timeout: invalid duration: bare number 30: write a string with a unit, e.g. "30s"`}},
		{"duration negative", withRetry(`"max_delay":"-1s"`), []string{rc + `max_delay: invalid duration "-1s": must not be negative`}},
		{"duration missing unit", withRetry(`"initial_delay":"1h30"`), []string{rc + `initial_delay: invalid duration "1h30": missing unit after "30"`}},
		{"duration secs/nanos bad", withRetry(`"retry_budget":{"secs":1,"nanos":2000000000}`), []string{rc + `retry_budget: invalid duration: {secs: 1, nanos: 2000000000}`}},
		{"duration secs/nanos unknown", withRetry(`"retry_budget":{"secs":1,"millis":2}`), []string{rc + `retry_budget: invalid duration: {secs, nanos} form: unknown field "millis"`}},

		// Top-level validation.
		{"id not a token", withTop(`"id":"a.b"`), []string{`id: invalid character '.' at offset 1`}},
		{"pool not a token", withTop(`"pool":"gpu pool"`), []string{`pool: invalid character ' ' at offset 3`}},
		{"id too long", withTop(`"id":"` + strings.Repeat("x", 129) + `"`), []string{`id: is 129 bytes long, the limit is 128`}},
		{"items and input", withTop(`"input":"items.json"`), []string{`input: set either items or input, not both`}},
		{"neither items nor input", `{"agent_template":[{"shell":"x"}]}`, []string{`items: required: set items (inline) or input (a file of items)`}},
		{"empty items", `{"items":[],"agent_template":[{"shell":"x"}]}`, []string{`items: must not be empty`}},
		{"json_path without input", withTop(`"json_path":"$[*]"`), []string{`json_path: only allowed with input`}},
		{"json_path not a path", `{"input":"f.json","json_path":"items","agent_template":[{"shell":"x"}]}`, []string{`json_path: must start with "$"`}},
		{"max_parallel negative", withTop(`"max_parallel":-1`), []string{`max_parallel: must be >= 0 (0 = no cap), got -1`}},
		{"no steps", `{"items":[1]}`, []string{`agent_template: required: at least one step`}},
		{"empty steps", `{"items":[1],"agent_template":[]}`, []string{`agent_template: required: at least one step`}},
		{"group_by bad template", withTop(`"group_by":"${item.region"`), []string{`group_by: unterminated ${ at offset 0`}},
		{"group_by unknown at grouping", withTop(`"group_by":"${job_id}"`), []string{`group_by: ${job_id} is not known when items are grouped`}},
		{"env bad name", withTop(`"env":{"1X":"a","OK":"b"}`), []string{`env.1X: invalid variable name`}},

		// Steps.
		{"step with neither", withStep(`{"name":"x"}`), []string{`agent_template[0]: needs one of shell (a command) or handler (a registered Go handler)`}},
		{"step with both", withStep(`{"shell":"x","handler":"h"}`), []string{`agent_template[0]: set only one of shell or handler`}},
		{"empty shell", withStep(`{"shell":""}`), []string{`agent_template[0].shell: must not be empty`}},
		{"blank handler", withStep(`{"handler":"  "}`), []string{`agent_template[0].handler: must not be empty`}},
		{"bad template", withStep(`{"shell":"echo ${foo}"}`), []string{`agent_template[0].shell: ${foo}: unknown reference "foo": no earlier step captures it (use item, item.<field>, item_id, item_index, item_total, job_id, attempt, item_workdir, env.<NAME> or a bare name of the job's env, map.<field> in reduce, shell.output, or capture: on an earlier step)`}},
		{"map outside reduce", withStep(`{"shell":"echo ${map.results}"}`), []string{`agent_template[0].shell: ${map.*} references are only allowed in reduce steps`}},
		{"bad map ref in reduce", withTop(`"reduce":[{"shell":"x ${map.nope}"}]`), []string{`reduce[0].shell: ${map.nope} at offset 2: map references are`}},
		{"with on a shell step", withStep(`{"shell":"x","with":{"a":1}}`), []string{`agent_template[0].with: only allowed with handler`}},

		// retry_config.
		{"attempts zero", withRetry(`"attempts":0`), []string{rc + `attempts: must be between 1 and 10000, got 0`}},
		{"attempts too many", withRetry(`"attempts":10001`), []string{rc + `attempts: must be between 1 and 10000, got 10001`}},
		{"jitter_factor above 1", withRetry(`"jitter_factor":1.5`), []string{rc + `jitter_factor: must be between 0 and 1, got 1.5`}},
		{"jitter_factor negative", withRetry(`"jitter_factor":-0.1`), []string{rc + `jitter_factor: must be between 0 and 1, got -0.1`}},
		{"jitter_mode unknown", withRetry(`"jitter_mode":"fulll"`), []string{rc + `jitter_mode: unknown jitter mode "fulll" (use proportional, full, equal or decorrelated) (did you mean "full"?)`}},
		{"retry_budget zero", withRetry(`"retry_budget":"0s"`), []string{rc + `retry_budget: must be greater than 0 (omit it for no budget), got 0s`}},

		// messages.Backoff forms.
		{"backoff unknown name", withRetry(`"backoff":"expo"`), []string{rc + `backoff: unknown backoff strategy "expo" (use fixed, linear, exponential, fibonacci or custom)`}},
		{"backoff typo", withRetry(`"backoff":"fibonaci"`), []string{rc + `backoff: unknown backoff strategy "fibonaci" (use fixed, linear, exponential, fibonacci or custom) (did you mean "fibonacci"?)`}},
		{"backoff unknown key", withRetry(`"backoff":{"quadratic":{}}`), []string{rc + `backoff.quadratic: unknown backoff strategy`}},
		{"backoff two keys", withRetry(`"backoff":{"fixed":null,"linear":null}`), []string{rc + `backoff: expected one key naming the strategy (fixed, linear, exponential, fibonacci or custom), got an object with 2 keys (fixed, linear)`}},
		{"backoff number", withRetry(`"backoff":2`), []string{rc + `backoff: expected a strategy name`}},
		{"backoff params not an object", withRetry(`"backoff":{"linear":"2s"}`), []string{rc + `backoff.linear: expected an object, got string "2s"`}},
		{"base below 1", withRetry(`"backoff":{"exponential":{"base":0.5}}`), []string{rc + `backoff.exponential.base: must be >= 1, got 0.5`}},
		{"base zero", withRetry(`"backoff":{"exponential":{"base":0}}`), []string{rc + `backoff.exponential.base: must be >= 1, got 0`}},
		{"multiplier below 1", withRetry(`"backoff":{"exponential":{"initial":"1s","multiplier":0.9}}`), []string{rc + `backoff.exponential.multiplier: must be >= 1, got 0.9`}},
		{"base and multiplier", withRetry(`"backoff":{"exponential":{"base":2,"multiplier":3}}`), []string{rc + `backoff.exponential.multiplier: set base or multiplier (its legacy name), not both`}},
		{"fixed delay and initial", withRetry(`"backoff":{"fixed":{"delay":"1s","initial":"2s"}}`), []string{rc + `backoff.fixed.initial: set delay or initial, not both`}},
		{"custom negative delay", withRetry(`"backoff":{"custom":{"delays":["1s","-1s"]}}`), []string{rc + `backoff.custom.delays[1]: invalid duration "-1s": must not be negative`}},
		{"custom bad secs/nanos", withRetry(`"backoff":{"custom":{"delays":[{"secs":-3}]}}`), []string{rc + `backoff.custom.delays[0]: invalid duration: {secs: -3, nanos: 0}`}},
		{"custom initial", withRetry(`"backoff":{"custom":{"initial":"1s"}}`), []string{rc + `backoff.custom.initial: unknown field`}},

		// Matchers.
		{"matcher unknown", withRetry(`"retry_on":["netwrok"]`), []string{rc + `retry_on[0]: unknown matcher "netwrok" (use network, timeout, server_error, rate_limit, {pattern: regex} or {exit_code: [codes]}) (did you mean "network"?)`}},
		{"invalid regex", withRetry(`"retry_on":["network",{"pattern":"a"},{"pattern":"conn("}]`), []string{rc + `retry_on[2].pattern: invalid regex: missing closing )`}},
		{"invalid escape", withRetry(`"retry_on":[{"pattern":"a\\q"}]`), []string{rc + "retry_on[0].pattern: invalid regex: invalid escape sequence: `\\q`"}},
		{"empty pattern", withRetry(`"retry_on":[{"pattern":""}]`), []string{rc + `retry_on[0].pattern: must not be empty`}},
		{"pattern not a string", withRetry(`"retry_on":[{"pattern":5}]`), []string{rc + `retry_on[0].pattern: expected a regular expression string, got number 5`}},
		{"exit code out of range", withRetry(`"retry_on":[{"exit_code":[1,256]}]`), []string{rc + `retry_on[0].exit_code[1]: must be between 0 and 255, got 256`}},
		{"exit code negative", withRetry(`"retry_on":[{"exit_code":-1}]`), []string{rc + `retry_on[0].exit_code[0]: must be between 0 and 255, got -1`}},
		{"exit codes empty", withRetry(`"retry_on":[{"exit_code":[]}]`), []string{rc + `retry_on[0].exit_code: must list at least one exit code`}},
		{"exit code string", withRetry(`"retry_on":[{"exit_code":"1"}]`), []string{rc + `retry_on[0].exit_code: expected an exit code or a list of exit codes, got string "1"`}},
		{"matcher two keys", withRetry(`"retry_on":[{"pattern":"a","exit_code":[1]}]`), []string{rc + `retry_on[0]: expected one key: pattern or exit_code, got an object with 2 keys`}},
		{"matcher unknown key", withRetry(`"retry_on":[{"patern":"a"}]`), []string{rc + `retry_on[0].patern: unknown matcher field (use pattern or exit_code) (did you mean "pattern"?)`}},

		// on_failure.
		{"on_failure unknown", withRetry(`"on_failure":"stpo"`), []string{rc + `on_failure: unknown action "stpo" (use stop, continue or {fallback: {command: "..."}}) (did you mean "stop"?)`}},
		{"fallback alone", withRetry(`"on_failure":"fallback"`), []string{rc + `on_failure: fallback needs a command: {fallback: {command: "..."}}`}},
		{"fallback empty command", withRetry(`"on_failure":{"fallback":{"command":""}}`), []string{rc + `on_failure.fallback.command: required: the command to run when the step gives up`}},
		{"fallback no command", withRetry(`"on_failure":{"fallback":{}}`), []string{rc + `on_failure.fallback.command: required`}},
		{"fallback bad template", withRetry(`"on_failure":{"fallback":{"command":"x ${nope}"}}`), []string{rc + `on_failure.fallback.command: ${nope}: unknown reference "nope": no earlier step captures it (use item, item.<field>, item_id, item_index, item_total, job_id, attempt, item_workdir, env.<NAME> or a bare name of the job's env, map.<field> in reduce, shell.output, or capture: on an earlier step)`}},
		{"on_failure object stop", withRetry(`"on_failure":{"stop":null}`), []string{rc + `on_failure.stop: unknown action (the object form is {fallback: {command: "..."}}; write stop or continue as a string)`}},

		// error_policy.
		{"custom alone", withPolicy(`"on_item_failure":"custom"`), []string{`error_policy.on_item_failure: custom needs a step: {custom: {handler: name, with: {...}}} or {custom: {shell: "..."}}`}},
		{"custom empty step", withPolicy(`"on_item_failure":{"custom":{}}`), []string{`error_policy.on_item_failure.custom: needs one of shell (a command) or handler`}},
		{"custom bad step field", withPolicy(`"on_item_failure":{"custom":{"handler":"h","wiht":{}}}`), []string{`error_policy.on_item_failure.custom.wiht: unknown field (did you mean "with"?)`}},
		{"item failure unknown", withPolicy(`"on_item_failure":"dql"`), []string{`error_policy.on_item_failure: unknown action "dql" (use dlq, retry, skip, stop or {custom: {handler: name, with: {...}}} or {custom: {shell: "..."}}) (did you mean "dlq"?)`}},
		{"max_failures zero", withPolicy(`"max_failures":0`), []string{`error_policy.max_failures: must be >= 1, got 0`}},
		{"failure_threshold zero", withPolicy(`"failure_threshold":0`), []string{`error_policy.failure_threshold: must be greater than 0 and at most 1 (a failure rate), got 0`}},
		{"failure_threshold above 1", withPolicy(`"failure_threshold":1.5`), []string{`error_policy.failure_threshold: must be greater than 0 and at most 1 (a failure rate), got 1.5`}},
		{"batched alone", withPolicy(`"error_collection":"batched"`), []string{`error_policy.error_collection: batched needs a size: {batched: {size: N}}`}},
		{"batched size zero", withPolicy(`"error_collection":{"batched":{"size":0}}`), []string{`error_policy.error_collection.batched.size: must be >= 1, got 0`}},
		{"batched no size", withPolicy(`"error_collection":{"batched":{}}`), []string{`error_policy.error_collection.batched.size: must be >= 1, got 0`}},
		{"collection unknown", withPolicy(`"error_collection":"agregate"`), []string{`error_policy.error_collection: unknown mode "agregate" (use aggregate, immediate or {batched: {size: N}}) (did you mean "aggregate"?)`}},
		{"breaker zeros", withPolicy(`"circuit_breaker":{"failure_threshold":0,"success_threshold":-1,"timeout":"0s","half_open_requests":0}`), []string{
			`error_policy.circuit_breaker.failure_threshold: must be >= 1, got 0`,
			`error_policy.circuit_breaker.success_threshold: must be >= 1, got -1`,
			`error_policy.circuit_breaker.half_open_requests: must be >= 1, got 0`,
			`error_policy.circuit_breaker.timeout: must be greater than 0, got 0s`,
		}},
		{"workflow max_attempts", withPolicy(`"retry_config":{"max_attempts":0}`), []string{`error_policy.retry_config.max_attempts: must be between 1 and 10000, got 0`}},
		{"workflow unknown field", withPolicy(`"retry_config":{"attempts":3}`), []string{`error_policy.retry_config.attempts: unknown field (did you mean "max_attempts"?)`}},

		// Budgets.
		{"budget negative", withTop(`"retry_budget":-1`), []string{`retry_budget: must be >= 0 (0 = no retries), got -1`}},
		{"budget percent above 100", withTop(`"retry_budget":"150%"`), []string{`retry_budget: percentage must be between 0% and 100%, got 150%`}},
		{"budget percent negative", withTop(`"retry_budget_per_item":"-5%"`), []string{`retry_budget_per_item: percentage must be between 0% and 100%, got -5%`}},
		{"budget not a number", withTop(`"retry_budget":"lots"`), []string{`retry_budget: expected a non-negative integer or a percentage such as "10%", got string "lots"`}},
		{"budget bad percent", withTop(`"retry_budget":"x%"`), []string{`retry_budget: invalid percentage "x%"`}},
		{"budget fraction", withTop(`"retry_budget":2.5`), []string{`retry_budget: expected a non-negative integer or a percentage such as "10%", got number 2.5`}},
		{"budget bool", withTop(`"retry_budget":true`), []string{`retry_budget: expected a non-negative integer or a percentage such as "10%", got boolean true`}},

		// Best effort.
		{"min_groups negative", withTop(`"best_effort":{"min_groups":-1}`), []string{`best_effort.min_groups: must be >= 0, got -1`}},
		{"deadline negative", withTop(`"best_effort":{"deadline":"-5m"}`), []string{`best_effort.deadline: invalid duration "-5m": must not be negative`}},
		{"deadline zero", withTop(`"best_effort":{"deadline":"0s"}`), []string{`best_effort.deadline: must be greater than 0 (omit it for the operator's default, 5m out of the box)`}},

		// agent_timeout and a step's own circuit breaker.
		{"agent_timeout zero", withTop(`"agent_timeout":"0s"`), []string{`agent_timeout: must be greater than 0 (omit it for no bound)`}},
		{"agent_timeout negative", withTop(`"agent_timeout":"-1m"`), []string{`agent_timeout: invalid duration "-1m": must not be negative`}},
		{"step breaker zeros", withRetry(`"circuit_breaker":{"failure_threshold":0,"timeout":"0s"}`), []string{
			rc + `circuit_breaker.failure_threshold: must be >= 1, got 0`,
			rc + `circuit_breaker.timeout: must be greater than 0, got 0s`,
		}},
		{"step breaker unknown field", withRetry(`"circuit_breaker":{"threshold":3}`), []string{rc + `circuit_breaker.threshold: unknown field`}},
		{"reduce step breaker", withTop(`"reduce":[{"shell":"x","retry_config":{"circuit_breaker":{}}}]`), []string{`reduce[0].retry_config.circuit_breaker: only applies to agent_template steps`}},
		{"late_results unknown", withTop(`"best_effort":{"late_results":"lgo"}`), []string{`best_effort.late_results: unknown policy "lgo" (use log or update; AD-44's log_only and update_result are accepted too) (did you mean "log"?)`}},

		// Items.
		{"duplicate item ids", `{"items":[{"id":"a"},2,3,{"id":"a"}],"agent_template":[{"shell":"x"}]}`, []string{`items[3]: duplicate item id "a" (same as items[0])`}},
		{"id collides with an index", `{"items":[{"id":"1"},{"x":1}],"agent_template":[{"shell":"x"}]}`, []string{`items[1]: duplicate item id "1" (same as items[0])`}},
		{"numeric ids", `{"items":[{"id":7},{"id":"7"}],"agent_template":[{"shell":"x"}]}`, []string{`items[1]: duplicate item id "7" (same as items[0])`}},
		{"id_field", `{"id_field":"key","items":[{"key":"k","id":1},{"key":"k","id":2}],"agent_template":[{"shell":"x"}]}`, []string{`items[1]: duplicate item id "k" (same as items[0])`}},
		{"empty item id", `{"items":[{"id":""}],"agent_template":[{"shell":"x"}]}`, []string{`items[0].id: item id must not be empty`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := parseJSON([]byte(tt.in))
			if spec != nil {
				t.Errorf("got a spec along with the error")
			}
			requirePrefixes(t, err, tt.want)
		})
	}
}

// TestAllProblemsAtOnce: every problem of a document is reported, each
// with its full path, in one error.
func TestAllProblemsAtOnce(t *testing.T) {
	in := `{
  "id": "nightly resize",
  "items": [{"id": "a"}, {"id": "b"}, {"id": "a"}],
  "agent_template": [
    {"shell": "convert ${item.path}", "timeout": "5 seconds"},
    {"handler": "upload", "retyr_config": {"attempts": 3},
     "retry_config": {"attempts": 0, "jitter_factor": 2,
       "retry_on": ["network", "timeout", {"pattern": "conn("}]}},
    {"name": "nothing"}
  ],
  "error_policy": {"error_collection": "batched", "max_failures": 0},
  "retry_budget": "120%"
}`
	_, err := parseJSON([]byte(in))
	want := []string{
		`id (line 2): invalid character ' ' at offset 7 (allowed: letters, digits, '-', '_')`,
		`items[2] (line 3): duplicate item id "a" (same as items[0])`,
		`agent_template[0].timeout (line 5): invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`,
		`agent_template[1].retyr_config (line 6): unknown field (did you mean "retry_config"?)`,
		`agent_template[1].retry_config.attempts (line 7): must be between 1 and 10000, got 0`,
		`agent_template[1].retry_config.jitter_factor (line 7): must be between 0 and 1, got 2`,
		`agent_template[1].retry_config.retry_on[2].pattern (line 8): invalid regex: missing closing )`,
		`agent_template[2] (line 9): needs one of shell (a command) or handler (a registered Go handler)`,
		`error_policy.error_collection (line 11): batched needs a size: {batched: {size: N}}`,
		`error_policy.max_failures (line 11): must be >= 1, got 0`,
		`retry_budget (line 12): percentage must be between 0% and 100%, got 120%`,
	}
	got := problems(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantMsg := "invalid job spec: " + strings.Join(want, "; ")
	if err.Error() != wantMsg {
		t.Errorf("Error() = %q\nwant %q", err.Error(), wantMsg)
	}
}

// TestSingleLineJSONHasNoLines: compact JSON (the API's form) gets no line
// numbers, and problems keep decode-then-validation order.
func TestSingleLineJSONHasNoLines(t *testing.T) {
	_, err := parseJSON([]byte(`{"pool":"a b","items":[1],"agent_template":[{"shell":"x","timeout":"1x"}]}`))
	requirePrefixes(t, err, []string{
		`agent_template[0].timeout: invalid duration "1x": unknown unit "x"`,
		`pool: invalid character ' ' at offset 1`,
	})
}

func TestParseJSONDesignExample(t *testing.T) {
	data, err := os.ReadFile("testdata/design.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	attempts, budget := 5, messages.MustDuration("5m")
	ini, maxd, jf := messages.MustDuration("1s"), messages.MustDuration("30s"), 0.3
	maxAttempts, maxFailures, threshold, cont := 3, 10, 0.25, true
	want := &messages.JobSpec{
		ID: "nightly-resize", Name: "resize images", Pool: "default", GroupBy: "${item.region}",
		Items: []json.RawMessage{
			json.RawMessage(`{"id":"a","path":"a.jpg","region":"eu"}`),
			json.RawMessage(`{"id":"b","path":"b.jpg","region":"us"}`),
			json.RawMessage(`{"id":"c","path":"c <1>.jpg","region":"eu","size":1.50}`),
		},
		MaxParallel: 10,
		AgentTemplate: []messages.Step{
			{
				Shell: "convert ${item.path} out/${item.id}.png", Timeout: messages.MustDuration("30s"),
				RetryConfig: &messages.RetryConfig{
					Attempts: &attempts, Backoff: &messages.Backoff{Kind: messages.BackoffExponential},
					InitialDelay: &ini, MaxDelay: &maxd, Jitter: true, JitterFactor: &jf,
					RetryOn:     []messages.Matcher{{Builtin: messages.MatchNetwork}, {Builtin: messages.MatchTimeout}, {Pattern: "conn.*refused"}},
					RetryBudget: &budget, OnFailure: &messages.OnFailure{Action: messages.OnFailureStop},
				},
			},
			{Handler: "upload", With: map[string]any{"bucket": "photos", "parts": json.Number("4")}},
		},
		ErrorPolicy: &messages.ErrorPolicy{
			OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureDLQ}, ContinueOnFailure: &cont,
			MaxFailures: &maxFailures, FailureThreshold: &threshold,
			ErrorCollection: &messages.ErrorCollection{Mode: messages.CollectAggregate},
			CircuitBreaker:  &messages.CircuitBreakerConfig{FailureThreshold: 5, SuccessThreshold: 3, Timeout: messages.MustDuration("30s"), HalfOpenRequests: 3},
			RetryConfig: &messages.WorkflowRetryConfig{
				MaxAttempts: &maxAttempts,
				Backoff:     &messages.Backoff{Kind: messages.BackoffExponential, Base: 2, Initial: &ini},
			},
		},
		RetryBudget:        &messages.BudgetValue{Count: 20},
		RetryBudgetPerItem: &messages.BudgetValue{Count: 3},
		BestEffort:         &messages.BestEffort{MinGroups: 2, Deadline: messages.MustDuration("5m"), LateResults: messages.LateResultsLog},
		Reduce:             []messages.Step{{Shell: "aggregate.sh ${map.total}"}},
	}
	if !reflect.DeepEqual(spec, want) {
		g, _ := json.MarshalIndent(spec, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("got\n%s\nwant\n%s", g, w)
	}
}

// TestInlineItemsKeepTheirBytes: an inline item keeps its key order and
// spelling (the agent passes it on as ITEM_JSON), compacted, and survives
// a marshal/parse round trip byte for byte.
func TestInlineItemsKeepTheirBytes(t *testing.T) {
	spec := mustParse(t, `{"items": [ {"z": 1, "a": "<b> & \u00e9\/", "m": {"y": [1, 2.50, 1e3], "b": null}} , "s", 7 ],
		"agent_template": [{"shell": "x"}]}`)
	want := []string{`{"z":1,"a":"<b> & é/","m":{"y":[1,2.50,1e3],"b":null}}`, `"s"`, `7`}
	for i, w := range want {
		if string(spec.Items[i]) != w {
			t.Errorf("items[%d] = %s, want %s", i, spec.Items[i], w)
		}
	}
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `\u003cb\u003e`) {
		t.Fatalf("expected json.Marshal to HTML-escape the item: %s", out)
	}
	back := mustParse(t, string(out))
	if !reflect.DeepEqual(back.Items, spec.Items) {
		t.Fatalf("items after round trip: %s", back.Items)
	}
}
