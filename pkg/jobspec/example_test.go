package jobspec_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A YAML spec with two problems: both are reported, with path and line.
func ExampleParse() {
	_, err := jobspec.Parse([]byte(`
items: [{id: a}, {id: b}]
agent_template:
  - shell: convert ${item.path}
    retyr_config: {attempts: 3}
  - handler: upload
    timeout: 5 seconds
`))
	var ve *messages.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Println(p)
		}
	}
	// Output:
	// agent_template[0].retyr_config (line 5): unknown field (did you mean "retry_config"?)
	// agent_template[1].timeout (line 7): invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")
}

// ToJSON turns a YAML spec into the canonical JSON that jobs.submit takes.
func ExampleToJSON() {
	out, err := jobspec.ToJSON([]byte(`
id: thumbs
items: [{id: a, path: a.jpg}]
agent_template:
  - shell: convert ${item.path} out/${item.id}.png
    retry_config:
      backoff: {exponential: {base: 3}}
      retry_on: [network, {exit_code: 75}]
retry_budget: 10%
`))
	fmt.Println(string(out), err)
	// Output:
	// {"id":"thumbs","items":[{"id":"a","path":"a.jpg"}],"agent_template":[{"shell":"convert ${item.path} out/${item.id}.png","retry_config":{"backoff":{"exponential":{"base":3}},"retry_on":["network",{"exit_code":[75]}]}}],"retry_budget":"10%"} <nil>
}

// A standalone retry_config, as `fleetctl backoff plan --config` reads it.
func ExampleParseRetryConfig() {
	rc, err := jobspec.ParseRetryConfig([]byte(`
retry_config:
  attempts: 5
  max_delay: 60s
  backoff:
    custom:
      delays: [1s, {secs: 3, nanos: 0}, 7s, 15s]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	eff := jobspec.RetryConfigWithDefaults(rc)
	fmt.Println(*eff.Attempts, eff.Backoff.Kind, eff.Backoff.Delays, *eff.MaxDelay)
	// Output:
	// 5 custom [1s 3s 7s 15s] 1m
}

// WithDefaults gives the spec as accepted: every default filled in, as the
// coordinator records it and agents run it.
func ExampleWithDefaults() {
	spec, _ := jobspec.Parse([]byte(`{"input": "items.json", "agent_template": [{"shell": "process ${item.id}"}]}`))
	eff := jobspec.WithDefaults(spec)
	rc := eff.AgentTemplate[0].RetryConfig
	fmt.Println(eff.Pool, eff.JSONPath, eff.AgentTemplate[0].Name)
	fmt.Println(*rc.Attempts, rc.Backoff.Kind, rc.Backoff.Base, *rc.InitialDelay, *rc.MaxDelay, rc.OnFailure.Action)
	fmt.Println(eff.ErrorPolicy.OnItemFailure.Action, *eff.ErrorPolicy.ContinueOnFailure, eff.ErrorPolicy.ErrorCollection.Mode)
	// Output:
	// default $[*] step-1
	// 3 exponential 2 1s 30s stop
	// dlq true aggregate
}

// Validate checks a spec built in code, with the same rules and paths.
func ExampleValidate() {
	spec := &messages.JobSpec{
		Items:         []json.RawMessage{json.RawMessage(`{"id":"a"}`), json.RawMessage(`{"id":"a"}`)},
		AgentTemplate: []messages.Step{{Shell: "echo ${map.results}"}},
		ErrorPolicy:   &messages.ErrorPolicy{MaxFailures: new(0)},
	}
	fmt.Println(jobspec.Validate(spec))
	// Output:
	// invalid job spec: agent_template[0].shell: ${map.*} references are only allowed in reduce steps; error_policy.max_failures: must be >= 1, got 0; items[1]: duplicate item id "a" (same as items[0])
}

// A job in Prodigy's layout, pasted as written: Explain says what each of
// its fields means in jetfleet's own layout.
func ExampleExplain() {
	spec, notes, err := jobspec.Explain([]byte(`name: nightly
mode: mapreduce
map:
  input: "items.json"
  agent_template:
    - shell: "process ${item.id}"
      on_failure:
        shell: "cleanup ${item.id}"
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	fmt.Println(spec.Input, spec.AgentTemplate[0].RetryConfig.OnFailure.Fallback)
	// Output:
	// mode (line 2): mapreduce: the job runs agent_template once per item (map.agent_template), then reduce once
	// map (line 3): its fields are the job's own (map.input is input, map.agent_template is agent_template, ...)
	// map.agent_template[0] (line 6): has no retry_config: it runs once, as Prodigy runs a command without one (a step in jetfleet's layout gets 3 attempts); a failed item is then handled by error_policy
	// map.agent_template[0].on_failure (line 7): is the step's fallback (retry_config.on_failure: {fallback: {command: ...}}): it runs when the step gives up; the item goes on with the next step if it succeeds
	// items.json cleanup ${item.id}
}
