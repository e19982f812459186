package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FuzzParseYAML: parsing YAML (or JSON) never panics, errors are always a
// non-empty *messages.ValidationError, and a spec that parses converts to
// JSON that parses back to an equal spec.
func FuzzParseYAML(f *testing.F) {
	for _, name := range []string{"testdata/design.yaml", "testdata/design.json", "testdata/bad.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
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
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Parse(data)
		if err != nil {
			var ve *messages.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, messages.ErrInvalidSpec) {
				t.Fatalf("error %v (%T) is not a non-empty *ValidationError", err, err)
			}
			_ = err.Error()
			return
		}
		out, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(back, spec) {
			t.Fatalf("round trip differs:\n%s\n%+v\n%+v", out, back, spec)
		}
		if err := spec.WithDefaults().Validate(); err != nil {
			t.Fatalf("defaults do not validate: %v", err)
		}
	})
}
