package messages_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A spec with two problems: both are reported, each with its path.
func ExampleParseJobSpec() {
	_, err := messages.ParseJobSpec([]byte(`{
		"items": [{"id": "a"}, {"id": "b"}],
		"agent_template": [
			{"shell": "convert ${item.path}", "timeout": "5 seconds"},
			{"handler": "upload", "retry_config": {"retry_on": ["network", {"pattern": "conn("}]}}
		]
	}`))
	var ve *messages.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Println(p)
		}
	}
	fmt.Println(errors.Is(err, messages.ErrInvalidSpec))
	// Output:
	// agent_template[0].timeout (line 4): invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")
	// agent_template[1].retry_config.retry_on[1].pattern (line 5): invalid regex: missing closing )
	// true
}

func ExampleParseDuration() {
	for _, s := range []string{"500ms", "2m30s", "90m", "1.5s", "1d"} {
		d, _ := messages.ParseDuration(s)
		fmt.Println(s, "=", d.D(), "written", d)
	}
	_, err := messages.ParseDuration("5 seconds")
	fmt.Println(err)
	// Output:
	// 500ms = 500ms written 500ms
	// 2m30s = 2m30s written 2m30s
	// 90m = 1h30m0s written 1h30m
	// 1.5s = 1.5s written 1s500ms
	// 1d = 24h0m0s written 1d
	// invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")
}

// Polymorphic values marshal to their canonical form: the shorthand name
// when they have no parameters.
func ExampleBackoff_MarshalJSON() {
	spec, _ := messages.ParseJobSpec([]byte(`{"items": [1], "agent_template": [{"shell": "true", "retry_config": {
		"backoff": {"exponential": {"initial": "1s", "multiplier": 2}},
		"retry_on": ["Network", {"exit_code": 75}],
		"on_failure": {"fallback": {"command": "save-local.sh"}}}}]}`))
	out, _ := json.Marshal(spec.AgentTemplate[0].RetryConfig)
	fmt.Println(string(out))
	fixed, _ := json.Marshal(messages.Backoff{Kind: messages.BackoffFixed})
	fmt.Println(string(fixed))
	// Output:
	// {"backoff":{"exponential":{"base":2,"initial":"1s"}},"retry_on":["network",{"exit_code":[75]}],"on_failure":{"fallback":{"command":"save-local.sh"}}}
	// "fixed"
}

func ExampleJobSpec_WithDefaults() {
	spec, _ := messages.ParseJobSpec([]byte(`{"input": "items.json", "agent_template": [{"shell": "process ${item.id}"}]}`))
	eff := spec.WithDefaults()
	rc := eff.AgentTemplate[0].RetryConfig
	fmt.Println(eff.Pool, eff.JSONPath, eff.AgentTemplate[0].Name)
	fmt.Println(*rc.Attempts, rc.Backoff.Kind, rc.Backoff.Base, *rc.InitialDelay, *rc.MaxDelay, rc.OnFailure.Action)
	fmt.Println(eff.ErrorPolicy.OnItemFailure.Action, *eff.ErrorPolicy.ContinueOnFailure, eff.ErrorPolicy.ErrorCollection.Mode)
	// Output:
	// default $[*] step-1
	// 3 exponential 2 1s 30s stop
	// dlq true aggregate
}
