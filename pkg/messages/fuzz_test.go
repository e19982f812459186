package messages

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

// fuzzSeeds are spec documents for FuzzParseJobSpec: the docs/contract.md §3 example,
// the round-trip specs, the retry examples of the seed documents, and a few
// broken ones.
func fuzzSeeds(f *testing.F) [][]byte {
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

// FuzzParseJobSpec: parsing never panics, errors are always a non-empty
// *ValidationError, and a spec that parses re-marshals and re-parses to an
// equal spec, as do its defaults, which validate.
func FuzzParseJobSpec(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := ParseJobSpec(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v (%T) is not a non-empty *ValidationError", err, err)
			}
			_ = err.Error()
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("parsed spec does not validate: %v", err)
		}
		for _, s := range []*JobSpec{spec, spec.WithDefaults()} {
			out, err := json.Marshal(s)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			back, err := ParseJobSpec(out)
			if err != nil {
				t.Fatalf("re-parse of %s: %v", out, err)
			}
			if !reflect.DeepEqual(back, s) {
				t.Fatalf("round trip differs:\n%s\n%+v\n%+v", out, back, s)
			}
		}
	})
}

// FuzzParseDuration: parsing never panics, results are non-negative, and
// ParseDuration(d.String()) == d, through JSON too.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"500ms", "30s", "2m30s", "1h30m", "1d", "1w", "1.5s", ".5s", "0", "0s", "1h 30m", "1µs", "100ns",
		"1d2h3m4s5ms6us7ns", "106751d23h47m16s854ms775us807ns", "5 seconds", "-1s", "1.2.3s", "1h30", "", "9999999999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrBadDuration) {
				t.Fatalf("error %v does not wrap ErrBadDuration", err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %d < 0", s, int64(d))
		}
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %d; ParseDuration(%q) = %d, %v", s, int64(d), d.String(), int64(back), err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var d2 Duration
		if err := json.Unmarshal(b, &d2); err != nil || d2 != d {
			t.Fatalf("JSON round trip of %d via %s = %d, %v", int64(d), b, int64(d2), err)
		}
	})
}
