package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func problems(t *testing.T, err error) []string {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, messages.ErrInvalidSpec)
	var ve *messages.ValidationError
	require.ErrorAs(t, err, &ve)
	out := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		out[i] = p.Error()
	}
	return out
}

// requirePrefixes requires exactly len(want) problems, the i-th starting with want[i].
func requirePrefixes(t *testing.T, err error, want []string) {
	t.Helper()
	got := problems(t, err)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	require.True(t, ok, "problems:\n  got  %q\n  want %q", got, want)
}

// TestYAMLAndJSONIdentical: the docs/contract.md §3 example in YAML and in JSON
// decodes to identical structs, and ToJSON of the YAML is the canonical
// JSON of the JSON file.
func TestYAMLAndJSONIdentical(t *testing.T) {
	fromYAML, err := ParseFile("testdata/design.yaml")
	require.NoError(t, err)
	fromJSON, err := ParseFile("testdata/design.json")
	require.NoError(t, err)
	require.Equal(t, fromJSON, fromYAML)

	yamlData, err := os.ReadFile("testdata/design.yaml")
	require.NoError(t, err)
	converted, err := ToJSON(yamlData)
	require.NoError(t, err)
	canonical, err := json.Marshal(fromJSON)
	require.NoError(t, err)
	require.JSONEq(t, string(canonical), string(converted))
	require.Equal(t, string(canonical), string(converted))

	// The converted JSON is what the API takes: it parses back to the same spec.
	back, err := parseJSON(converted)
	require.NoError(t, err)
	require.Equal(t, fromYAML, back)
}

func TestParseForms(t *testing.T) {
	ms := func(s string) *messages.Duration { d := messages.MustDuration(s); return &d }
	tests := []struct {
		name string
		yaml string
		json string
	}{
		{"humantime durations", `{items: [1], agent_template: [{shell: x, timeout: 2m30s, retry_config: {initial_delay: 500ms, max_delay: 1h30m, retry_budget: 1d}}]}`,
			`{"items":[1],"agent_template":[{"shell":"x","timeout":"2m30s","retry_config":{"initial_delay":"500ms","max_delay":"1h30m","retry_budget":"1d"}}]}`},
		{"secs nanos delays", "items: [1]\nagent_template:\n  - shell: x\n    retry_config:\n      max_delay: 60s\n      backoff:\n        custom:\n          delays:\n            - secs: 1\n              nanos: 0\n            - 3s\n",
			`{"items":[1],"agent_template":[{"shell":"x","retry_config":{"max_delay":"60s","backoff":{"custom":{"delays":[{"secs":1,"nanos":0},"3s"]}}}}]}`},
		{"fixed null", "items: [1]\nagent_template: [{shell: x, retry_config: {backoff: {fixed: null}}}]", `{"items":[1],"agent_template":[{"shell":"x","retry_config":{"backoff":"fixed"}}]}`},
		{"fixed tilde", "items: [1]\nagent_template: [{shell: x, retry_config: {backoff: {fixed: ~}}}]", `{"items":[1],"agent_template":[{"shell":"x","retry_config":{"backoff":{"fixed":null}}}]}`},
		{"budgets", "items: [1]\nagent_template: [{shell: x}]\nretry_budget: 10%\nretry_budget_per_item: '3'", `{"items":[1],"agent_template":[{"shell":"x"}],"retry_budget":"10%","retry_budget_per_item":3}`},
		{"yaml numbers", "items: [0x1F, 0o17, 1e3, 1.50, -0, 12345678901234567890123, +5]\nagent_template: [{shell: x}]", `{"items":[31,15,1e3,1.50,-0,12345678901234567890123,5],"agent_template":[{"shell":"x"}]}`},
		{"timestamps stay strings", "items: [2001-12-14, {id: 2024-01-01T00:00:00Z}]\nagent_template: [{shell: x}]", `{"items":["2001-12-14",{"id":"2024-01-01T00:00:00Z"}],"agent_template":[{"shell":"x"}]}`},
		{"yes is a string", "items: [yes, no, on, true]\nagent_template: [{shell: x}]", `{"items":["yes","no","on",true],"agent_template":[{"shell":"x"}]}`},
		{"aliases", "items: [1]\nagent_template:\n  - {shell: a, retry_config: &rc {attempts: 5, backoff: fibonacci}}\n  - {shell: b, retry_config: *rc}\n",
			`{"items":[1],"agent_template":[{"shell":"a","retry_config":{"attempts":5,"backoff":"fibonacci"}},{"shell":"b","retry_config":{"attempts":5,"backoff":"fibonacci"}}]}`},
		{"merge keys", "items: [1]\nagent_template:\n  - &s {shell: a, timeout: 5s}\n  - {<<: *s, timeout: 1m}\n  - {<<: [*s], name: n}\n",
			`{"items":[1],"agent_template":[{"shell":"a","timeout":"5s"},{"shell":"a","timeout":"1m"},{"shell":"a","timeout":"5s","name":"n"}]}`},
		{"items keep their key order", "items:\n  - z: 1\n    a: \"<b> & é\"\n    m: {y: [1, 2.50, 1e3], b: ~}\n  - s\nagent_template: [{shell: x}]\n",
			`{"items":[{"z":1,"a":"<b> & \u00e9","m":{"y":[1,2.50,1e3],"b":null}},"s"],"agent_template":[{"shell":"x"}]}`},
		{"aliased item list", "agent_template: [{handler: h, with: {l: &l [{z: 1, a: 2}]}}]\nitems: *l\n",
			`{"items":[{"z":1,"a":2}],"agent_template":[{"handler":"h","with":{"l":[{"a":2,"z":1}]}}]}`},
		{"items with merge keys and aliases", "items:\n  - &base {z: 1, a: 2}\n  - {<<: *base, b: 3, a: 4}\n  - *base\nagent_template: [{shell: x}]\n",
			`{"items":[{"z":1,"a":2},{"b":3,"a":4,"z":1},{"z":1,"a":2}],"agent_template":[{"shell":"x"}]}`},
		{"flow mapping document", `{items: [1], agent_template: [{handler: h, with: {n: 1, s: "x"}}]}`, `{"items":[1],"agent_template":[{"handler":"h","with":{"n":1,"s":"x"}}]}`},
		{"legacy error policy", "items: [1]\nagent_template: [{shell: x}]\nerror_policy:\n  retry_config:\n    max_attempts: 3\n    backoff:\n      linear: {initial: 1s, increment: 2s}\n",
			`{"items":[1],"agent_template":[{"shell":"x"}],"error_policy":{"retry_config":{"max_attempts":3,"backoff":{"linear":{"initial":"1s","increment":"2s"}}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fromYAML, err := Parse([]byte(tt.yaml))
			require.NoError(t, err)
			fromJSON, err := Parse([]byte(tt.json))
			require.NoError(t, err)
			require.Equal(t, fromJSON, fromYAML)
		})
	}
	byName := func(name string) string {
		for _, tt := range tests {
			if tt.name == name {
				return tt.yaml
			}
		}
		t.Fatalf("no test %q", name)
		return ""
	}
	ordered := mustParseYAML(t, byName("items keep their key order"))
	require.Equal(t, `{"z":1,"a":"<b> & é","m":{"y":[1,2.50,1e3],"b":null}}`, string(ordered.Items[0]))
	require.Equal(t, `{"b":3,"a":4,"z":1}`, string(mustParseYAML(t, byName("items with merge keys and aliases")).Items[1]))

	spec, err := Parse([]byte(tests[0].yaml))
	require.NoError(t, err)
	rc := spec.AgentTemplate[0].RetryConfig
	require.Equal(t, messages.MustDuration("150s"), spec.AgentTemplate[0].Timeout)
	require.Equal(t, ms("500ms"), rc.InitialDelay)
	require.Equal(t, ms("90m"), rc.MaxDelay)
	require.Equal(t, ms("24h"), rc.RetryBudget)
	out, err := json.Marshal(rc)
	require.NoError(t, err)
	require.Equal(t, `{"initial_delay":"500ms","max_delay":"1h30m","retry_budget":"1d"}`, string(out))
}

func mustParseYAML(t *testing.T, doc string) *messages.JobSpec {
	t.Helper()
	spec, err := Parse([]byte(doc))
	require.NoError(t, err)
	return spec
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{"empty document"}},
		{"comment only", "# nothing\n", []string{"empty document"}},
		{"null document", "~\n", []string{"expected an object, got null"}},
		{"list document", "- a\n", []string{"expected an object, got array"}},
		{"syntax error", "items: [1\nagent_template: x\n", []string{"line 1: invalid YAML: did not find expected ',' or ']'"}},
		{"two documents", "items: [1]\n---\nitems: [2]\n", []string{"line 2: expected a single YAML document"}},
		{"duplicate key", "items: [1]\nagent_template: [{shell: x}]\nitems: [2]\n", []string{`items (line 3): duplicate key (first at line 1)`}},
		{"nested duplicate key", "items: [1]\nagent_template:\n  - shell: x\n    shell: y\n", []string{`agent_template[0].shell (line 4): duplicate key (first at line 3)`}},
		{"int key", "items: [1]\nagent_template: [{handler: h, with: {1: a}}]\n", []string{`agent_template[0].with.1 (line 2): mapping key 1 is a !!int, not a string (quote it)`}},
		{"null key", "items: [1]\nagent_template: [{shell: x}]\n~: 1\n", []string{`~ (line 3): mapping key ~ is a !!null, not a string (quote it)`}},
		{"bool key", "items: [1]\nagent_template: [{shell: x}]\ntrue: 1\n", []string{`true (line 3): mapping key true is a !!bool, not a string (quote it)`}},
		{"sequence key", "items: [1]\nagent_template: [{shell: x}]\n? [a]\n: b\n", []string{`line 3: mapping keys must be strings, got a sequence`}},
		{"infinity", "items: [.inf]\nagent_template: [{shell: x}]\n", []string{`items[0] (line 1): .inf is not a finite number`}},
		{"nan", "items: [1]\nagent_template: [{shell: x, retry_config: {jitter_factor: .nan}}]\n", []string{`agent_template[0].retry_config.jitter_factor (line 2): .nan is not a finite number`}},
		{"custom tag", "items: !include items.yaml\nagent_template: [{shell: x}]\n", []string{`items (line 1): unsupported YAML tag !include`}},
		{"custom tag on a step field", "items: [1]\nagent_template: [{shell: !env CMD}]\n", []string{`agent_template[0].shell (line 2): unsupported YAML tag !env`}},
		{"custom tag in a matcher", "items: [1]\nagent_template: [{shell: x, retry_config: {retry_on: [{pattern: !env P}]}}]\n", []string{`agent_template[0].retry_config.retry_on[0].pattern (line 2): unsupported YAML tag !env`}},
		{"custom tag in {secs, nanos}", "items: [1]\nagent_template: [{shell: x, timeout: {secs: !env S}}]\n", []string{`agent_template[0].timeout (line 2): unsupported YAML tag !env`}},
		{"infinity inside an item", "items: [{id: a, w: [1, -.inf]}]\nagent_template: [{shell: x}]\n", []string{`items[0].w[1] (line 1): -.inf is not a finite number`}},
		{"bad explicit int", "items: [!!int abc]\nagent_template: [{shell: x}]\n", []string{`items[0] (line 1): cannot decode !!str`}},
		{"bad merge", "items: [1]\nagent_template:\n  - {<<: [1], shell: x}\n", []string{`agent_template[0] (line 3): a merge key (<<) needs a mapping or a list of mappings`}},
		{"unknown anchor", "items: [1]\nagent_template: [*nope]\n", []string{`invalid YAML: unknown anchor 'nope' referenced`}},
		{"string for int", "items: [1]\nmax_parallel: ten\nagent_template: [{shell: x}]\n", []string{`max_parallel (line 2): expected an integer, got string "ten"`}},
		{"number for string", "items: [1]\nagent_template: [{shell: x}]\nid: 2024\n", []string{`id (line 3): expected a string, got number 2024 (quote it in YAML)`}},
		{"batched alone", "items: [1]\nagent_template: [{shell: x}]\nerror_policy: {error_collection: batched}\n", []string{`error_policy.error_collection (line 3): batched needs a size`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := Parse([]byte(tt.in))
			require.Nil(t, spec)
			requirePrefixes(t, err, tt.want)
		})
	}
}

// TestAllProblemsWithLines: every problem of testdata/bad.yaml, in line
// order, each with its path and line.
func TestAllProblemsWithLines(t *testing.T) {
	_, err := ParseFile("testdata/bad.yaml")
	require.Equal(t, []string{
		`id (line 1): invalid character ' ' at offset 7 (allowed: letters, digits, '-', '_')`,
		`items[2] (line 5): duplicate item id "a" (same as items[0])`,
		`agent_template[0].retyr_config (line 8): unknown field (did you mean "retry_config"?)`,
		`agent_template[1].timeout (line 10): invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`,
		`agent_template[1].retry_config.backoff.exponential.base (line 12): must be >= 1, got 0.5`,
		`agent_template[1].retry_config.retry_on[2].pattern (line 13): invalid regex: missing closing )`,
		`error_policy.error_collection (line 16): batched needs a size: {batched: {size: N}}`,
		`error_policy.max_failures (line 17): must be >= 1, got 0`,
		`error_policy.max_failures (line 18): duplicate key (first at line 17)`,
	}, problems(t, err))
}

// TestJSONFileLines: multi-line JSON files get lines too.
func TestJSONFileLines(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "job.json")
	require.NoError(t, os.WriteFile(p, []byte("{\n  \"items\": [1],\n  \"agent_template\": [\n    {\"shell\": \"x\", \"timeout\": \"1 min\"}\n  ]\n}\n"), 0o600))
	_, err := ParseFile(p)
	require.Equal(t, []string{`agent_template[0].timeout (line 4): invalid duration "1 min": unknown unit "min" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`}, problems(t, err))
}

func TestParseFileErrors(t *testing.T) {
	_, err := ParseFile(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorIs(t, err, ErrRead)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.False(t, errors.Is(err, messages.ErrInvalidSpec))

	// A .json file is JSON only: YAML in it is a JSON syntax error.
	p := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(p, []byte("items: [1]\n"), 0o600))
	_, err = ParseFile(p)
	requirePrefixes(t, err, []string{"invalid JSON at line 1, column 1: invalid character 'i' looking for beginning of value"})
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := Parse([]byte(b.String()))
	requirePrefixes(t, err, []string{"document too large: more than"})
}

func TestParseRetryConfig(t *testing.T) {
	three := 3
	want := &messages.RetryConfig{Attempts: &three, Backoff: &messages.Backoff{Kind: messages.BackoffFibonacci}}
	for _, in := range []string{
		"attempts: 3\nbackoff: fibonacci\n",
		"retry_config:\n  attempts: 3\n  backoff: fibonacci\n",
		`{"attempts": 3, "backoff": "fibonacci"}`,
		`{"retry_config": {"attempts": 3, "backoff": {"fibonacci": null}}}`,
	} {
		rc, err := ParseRetryConfig([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, rc, in)
	}

	_, err := ParseRetryConfig([]byte("retry_config:\n  attempts: 0\n  max_delay: 100ms\n  retry_on: [netwrk]\n"))
	require.Equal(t, []string{
		`retry_config.attempts (line 2): must be between 1 and 10000, got 0`,
		`retry_config.retry_on[0] (line 4): unknown matcher "netwrk" (use network, timeout, server_error, rate_limit, {pattern: regex} or {exit_code: [codes]}) (did you mean "network"?)`,
	}, problems(t, err))
	require.True(t, strings.HasPrefix(err.Error(), "invalid retry config: "), err.Error())

	_, err = ParseRetryConfig([]byte("attempts: 2\nattempts: 3\n"))
	require.Equal(t, []string{`attempts (line 2): duplicate key (first at line 1)`}, problems(t, err))

	p := filepath.Join(t.TempDir(), "rc.yaml")
	require.NoError(t, os.WriteFile(p, []byte("backoff: {exponential: {base: 3}}\n"), 0o600))
	rc, err := ParseRetryConfigFile(p)
	require.NoError(t, err)
	require.Equal(t, 3.0, rc.Backoff.Base)
	_, err = ParseRetryConfigFile(p + ".missing")
	require.ErrorIs(t, err, ErrRead)
}
