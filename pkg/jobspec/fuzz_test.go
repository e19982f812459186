package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FuzzParseYAML: Parse (YAML or JSON) passes checkParsed.
func FuzzParseYAML(f *testing.F) {
	for _, name := range []string{"testdata/design.yaml", "testdata/design.json", "testdata/bad.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range fuzzYAMLSeeds() {
		f.Add(s)
	}
	// The source documents' job examples and the fixtures of Prodigy's
	// workflow forms, in Prodigy's layout.
	seeds, err := filepath.Glob("testdata/seeds/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	forms, err := filepath.Glob("testdata/prodigy/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds, forms...)
	for _, name := range seeds {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("items: [a]\ncommands: [{shell: x, on_failure: {shell: y}}]\nretry_budget_per_workflow: 2\nbest_effort: true\nbest_effort_min_dcs: 1\nbest_effort_deadline_seconds: 2.5\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParsed(t, data, Parse) })
}

// FuzzParseJSON: reading JSON only, as ParseFile reads a .json file, passes
// checkParsed.
func FuzzParseJSON(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParsed(t, data, parseJSON) })
}

// checkParsed: parse never panics, its errors are always a non-empty
// *messages.ValidationError, and a spec it accepts validates, and
// re-marshals and re-parses to an equal spec, as do its defaults.
func checkParsed(t *testing.T, data []byte, parse func([]byte) (*messages.JobSpec, error)) {
	spec, err := parse(data)
	if err != nil {
		var ve *messages.ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, messages.ErrInvalidSpec) {
			t.Fatalf("error %v (%T) is not a non-empty *ValidationError", err, err)
		}
		_ = err.Error()
		return
	}
	if err := Validate(spec); err != nil {
		t.Fatalf("parsed spec does not validate: %v", err)
	}
	for _, s := range []*messages.JobSpec{spec, WithDefaults(spec)} {
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("round trip differs:\n%s\n%+v\n%+v", out, back, s)
		}
	}
}

// fuzzSeeds are spec documents for FuzzParseJSON: the docs/contract.md §3 example,
// the round-trip specs, the retry examples of the seed documents, and a few
// broken ones.
func fuzzSeeds(f testing.TB) [][]byte {
	design, err := os.ReadFile("testdata/design.json")
	if err != nil {
		f.Fatal(err)
	}
	seeds := [][]byte{design}
	for _, s := range roundTripSpecs {
		seeds = append(seeds, []byte(s))
	}
	for _, s := range []string{
		// Command-level retry (seed 003).
		withStep(`{"shell":"curl https://api.example.com/data","retry_config":{"attempts":5,"backoff":"exponential","initial_delay":"1s","max_delay":"30s","jitter":true,"jitter_factor":0.3,"retry_on":["network","timeout"],"retry_budget":"5m","on_failure":"stop"}}`),
		withStep(`{"shell":"upload-results.sh","retry_config":{"attempts":5,"backoff":"exponential","retry_on":["network","server_error"],"on_failure":{"fallback":{"command":"save-to-local.sh"}}}}`),
		// Custom delays in {secs, nanos} form (seed 002).
		withStep(`{"shell":"custom-retry-operation","retry_config":{"attempts":5,"max_delay":"60s","backoff":{"custom":{"delays":[{"secs":1,"nanos":0},{"secs":3,"nanos":0},{"secs":7,"nanos":0},{"secs":15,"nanos":0}]}}}}`),
		// Retry budget (seed 000).
		withStep(`{"shell":"x","retry_config":{"attempts":100,"retry_budget":"2m","backoff":{"exponential":{"base":2.0}},"initial_delay":"1s"}}`),
		// Workflow error policy (seed 003).
		`{"name":"robust-mapreduce","input":"items.json","json_path":"$.items[*]","max_parallel":10,"error_policy":{"on_item_failure":"dlq","continue_on_failure":true,"max_failures":10,"failure_threshold":0.25,"error_collection":"aggregate","circuit_breaker":{"failure_threshold":5,"success_threshold":3,"timeout":"30s","half_open_requests":3},"retry_config":{"max_attempts":3,"backoff":"exponential"}},"agent_template":[{"shell":"process ${item.id}"}],"reduce":[{"shell":"aggregate ${map.results}"}]}`,
		withPolicy(`"retry_config":{"max_attempts":3,"backoff":{"linear":{"initial":"1s","increment":"2s"}}}`),
		withPolicy(`"retry_config":{"backoff":{"fixed":{"delay":"2s"}}},"error_collection":{"batched":{"size":5}}`),
		// Budgets (AD-44).
		withTop(`"retry_budget":"10%","retry_budget_per_item":3,"best_effort":{"min_groups":2,"deadline":"5m","late_results":"update"},"group_by":"${item.dc}"`),
		// Broken.
		`{"items":[{"id":"a"},{"id":"a"}],"agent_template":[{"shell":"${map.x}","timeout":"5 seconds","retyr_config":{}}]}`,
		`{"items":[1],"agent_template":[{"shell":"x","retry_config":{"retry_on":[{"pattern":"conn("}],"backoff":{"expo":{}}}}]}`,
		"{\n\"items\": [1],\n\"items\": [2]\n}",
		`{"a":`, ``, `[]`, `{"items":[[[[[[[[[[1]]]]]]]]]]}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// fuzzYAMLSeeds are YAML documents: the seed documents' examples and the
// corners of YAML (anchors, merge keys, tags, non-string keys).
func fuzzYAMLSeeds() [][]byte {
	var out [][]byte
	for _, s := range []string{
		// Seed documents' examples (Prodigy retry docs, AD-44).
		"items: [1]\nagent_template:\n  - shell: flaky-command\n    retry_config:\n      attempts: 5\n      initial_delay: 2s\n      backoff: fixed\n",
		"items: [1]\nagent_template:\n  - shell: database-query\n    retry_config:\n      attempts: 5\n      initial_delay: \"1s\"\n      backoff:\n        linear:\n          increment: \"2s\"\n",
		"items: [1]\nagent_template:\n  - shell: custom-retry-operation\n    retry_config:\n      attempts: 5\n      max_delay: \"60s\"\n      backoff:\n        custom:\n          delays:\n            - secs: 1\n              nanos: 0\n            - secs: 3\n              nanos: 0\n",
		"input: work-items.json\njson_path: \"$.items[*]\"\nagent_template:\n  - shell: \"process-item ${item.id}\"\n    retry_config:\n      attempts: 5\n      initial_delay: \"2s\"\n      max_delay: \"60s\"\n      backoff:\n        exponential:\n          base: 2.0\n      jitter: true\n      jitter_factor: 0.25\n      retry_on:\n        - timeout\n        - pattern: \"connection refused\"\n",
		"name: robust-mapreduce\nerror_policy:\n  on_item_failure: dlq\n  continue_on_failure: true\n  max_failures: 10\n  circuit_breaker:\n    failure_threshold: 5\n    timeout: \"30s\"\ninput: items.json\njson_path: \"$.items[*]\"\nmax_parallel: 10\nagent_template:\n  - shell: \"process ${item.id}\"\n    retry_config:\n      attempts: 3\n      on_failure:\n        fallback:\n          command: save-to-local.sh\nreduce:\n  - shell: \"aggregate ${map.results}\"\n",
		"items: [{id: a, dc: eu}, {id: b, dc: us}]\ngroup_by: ${item.dc}\nagent_template: [{handler: h, with: {x: [1, {y: null}]}}]\nretry_budget: \"10%\"\nretry_budget_per_item: 3\nbest_effort: {min_groups: 1, deadline: 5m, late_results: update}\n",
		"items: [1]\nagent_template:\n  - &s {shell: a, retry_config: &rc {attempts: 2}}\n  - {<<: *s, retry_config: *rc}\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n",
		"items: [!!int 1, 0x10, 1e3, .5, 2001-12-14]\nagent_template: [{shell: x}]\n",
		"? [a]\n: b\n1: 2\n~: 3\n", "- a\n", "---\n...\n", "items: [1\n", "{a: b}", `{"items":[1],"agent_template":[{"shell":"x"}]}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}
