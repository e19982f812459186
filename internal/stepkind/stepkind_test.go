package stepkind

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestNeeds(t *testing.T) {
	fb := func(claude, fail bool) *messages.RetryConfig {
		return &messages.RetryConfig{OnFailure: &messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "x", Claude: claude, FailWorkflow: fail}}
	}
	cases := []struct {
		name string
		st   messages.Step
		want []string
	}{
		{"shell", messages.Step{Shell: "x"}, nil},
		{"handler", messages.Step{Handler: "h"}, nil},
		{"claude", messages.Step{Claude: "/x", RetryConfig: fb(true, false)}, []string{messages.CapabilityClaude}},
		{"claude fallback", messages.Step{Shell: "x", RetryConfig: fb(true, false)}, []string{messages.CapabilityClaude}},
		{"write_file", messages.Step{WriteFile: &messages.WriteFile{}}, []string{messages.CapabilityWriteFile}},
		{"foreach", messages.Step{Foreach: &messages.Foreach{}}, []string{messages.CapabilityForeach}},
		{"on_exit_code", messages.Step{Shell: "x", OnExitCode: map[string]messages.Step{"1": {Shell: "y"}}}, []string{messages.CapabilityHandlers}},
		{"fail_workflow", messages.Step{Shell: "x", RetryConfig: fb(false, true)}, []string{messages.CapabilityHandlers}},
		{"a fallback that reruns its step", messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{
			Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: 2}}}, []string{messages.CapabilityFallbackRuns}},
		{"a fallback with a timeout", messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{
			Action: messages.OnFailureFallback, Fallback: "fix", Timeout: messages.Duration(time.Second)}}}, []string{messages.CapabilityFallbackRuns}},
		{"max_attempts 1 runs once", messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{
			Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: 1}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, Needs(&c.st)) })
	}
}

func TestWalk(t *testing.T) {
	spec := &messages.JobSpec{
		AgentTemplate: []messages.Step{{Foreach: &messages.Foreach{Do: []messages.Step{{Shell: "a"}, {Claude: "b"}}}}},
		Reduce:        []messages.Step{{Shell: "r", OnExitCode: map[string]messages.Step{"2": {Shell: "two"}, "10": {Shell: "ten"}}}},
		Setup:         &messages.Setup{Commands: []messages.Step{{Shell: "s"}}},
		ErrorPolicy:   &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureCustom, Custom: &messages.Step{Shell: "c"}}},
	}
	var fields []string
	Walk(spec, func(f string, _ *messages.Step) { fields = append(fields, f) })
	require.Equal(t, []string{"agent_template[0]", "agent_template[0].foreach.do[0]", "agent_template[0].foreach.do[1]",
		"reduce[0]", "reduce[0].on_exit_code.10", "reduce[0].on_exit_code.2", "setup.commands[0]", "error_policy.on_item_failure.custom"}, fields)
}

func TestCheck(t *testing.T) {
	body := []messages.Step{{Shell: "x"}}
	cases := []struct {
		name string
		st   messages.Step
		want []string // fields
	}{
		{"a list", messages.Step{Foreach: &messages.Foreach{Items: []string{"a"}, Do: body}}, nil},
		{"a command", messages.Step{Foreach: &messages.Foreach{Command: "ls", Do: body, Parallel: MaxParallel, MaxItems: 3}}, nil},
		{"both", messages.Step{Foreach: &messages.Foreach{Items: []string{"a"}, Command: "ls", Do: body}}, []string{"foreach"}},
		{"with shell", messages.Step{Shell: "x", Foreach: &messages.Foreach{Items: []string{"a"}, Do: body}}, []string{"foreach"}},
		{"no body", messages.Step{Foreach: &messages.Foreach{Items: []string{"a"}}}, []string{"foreach.do"}},
		{"bounds", messages.Step{Foreach: &messages.Foreach{Items: []string{"a"}, Do: body, Parallel: -1, MaxItems: -1}}, []string{"foreach.parallel", "foreach.max_items"}},
		{"nested fields", messages.Step{Foreach: &messages.Foreach{Items: []string{"a"}, Do: []messages.Step{{Shell: "x", When: "true", Capture: "c"}}}},
			[]string{"foreach.do[0].capture", "foreach.do[0].when"}},
		{"exit codes", messages.Step{Shell: "x", OnExitCode: map[string]messages.Step{"0": {Shell: "a"}, "255": {Claude: "/b"}}}, nil},
		{"bad exit codes", messages.Step{Shell: "x", OnExitCode: map[string]messages.Step{"256": {Shell: "a"}, "01": {Shell: "a"}, "x": {Shell: "a"}}},
			[]string{"on_exit_code.01", "on_exit_code.256", "on_exit_code.x"}},
		{"exit codes of a handler step", messages.Step{Handler: "h", OnExitCode: map[string]messages.Step{"1": {Shell: "a"}}}, []string{"on_exit_code"}},
		{"fallback runs", messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{
			Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: MaxFallbackRuns, Timeout: messages.Duration(time.Second)}}}, nil},
		{"fallback runs out of bounds", messages.Step{Shell: "x", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{
			Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: MaxFallbackRuns + 1, Timeout: -1}}},
			[]string{"retry_config.on_failure.fallback.max_attempts", "retry_config.on_failure.fallback.timeout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, p := range Check(&c.st) {
				got = append(got, p.Field)
			}
			require.Equal(t, c.want, got)
		})
	}
}
