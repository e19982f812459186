package jobspec_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Prodigy's forms of a step's on_failure handler, as retry_config.on_failure.
func TestProdigyOnFailure(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       messages.OnFailure
		attempts   int
		wantErr    string
	}{
		{name: "true goes on", yaml: "on_failure: true", want: messages.OnFailure{Action: messages.OnFailureContinue}, attempts: 1},
		{name: "a shell command", yaml: `on_failure: "npm cache clean --force"`, want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "npm cache clean --force"}, attempts: 1},
		{name: "a slash command is claude's", yaml: `on_failure: "/fix-warnings"`, want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "/fix-warnings", Claude: true}, attempts: 1},
		{name: "a list of shell commands", yaml: "on_failure: [a, {shell: b}]", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "set -e\na\nb"}, attempts: 1},
		{name: "claude with max_attempts", yaml: "on_failure: {claude: \"/fix ${shell.output}\", max_attempts: 3, fail_workflow: false}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "/fix ${shell.output}", Claude: true, MaxAttempts: 3}, attempts: 1},
		{name: "max_retries, an older name", yaml: "on_failure: {shell: fix, max_retries: 2}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: 2}, attempts: 1},
		{name: "max_attempts 1 runs once", yaml: "on_failure: {shell: fix, max_attempts: 1}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix"}, attempts: 1},
		{name: "the step's own retry_config stays", yaml: "on_failure: {shell: fix, max_attempts: 2}\n    retry_config: {attempts: 4}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix", MaxAttempts: 2}, attempts: 4},
		{name: "handler options", yaml: "on_failure: {commands: [a, b], max_attempts: 2, handler_failure_fatal: true, timeout: 300, retry_original: true}",
			want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "set -e\na\nb", MaxAttempts: 2, HandlerFailureFatal: true, Timeout: messages.Duration(300 * time.Second)}, attempts: 1},
		{name: "a timeout as a duration", yaml: "on_failure: {shell: fix, timeout: 1m30s}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix", Timeout: messages.Duration(90 * time.Second)}, attempts: 1},
		{name: "handler_failure_fatal: false", yaml: "on_failure: {shell: fix, handler_failure_fatal: false, retry_original: false}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix"}, attempts: 1},
		{name: "max_attempts out of bounds", yaml: "on_failure: {shell: fix, max_attempts: 101}", wantErr: "commands[0].on_failure.max_attempts (line 3): expected a number of runs from 1 to 100, got 101"},
		{name: "max_attempts and max_retries", yaml: "on_failure: {shell: fix, max_attempts: 2, max_retries: 2}", wantErr: "commands[0].on_failure.max_retries (line 3): set one of max_attempts and max_retries"},
		{name: "a bad timeout", yaml: "on_failure: {shell: fix, timeout: -5}", wantErr: "commands[0].on_failure.timeout (line 3): expected a number of seconds greater than 0, got -5"},
		{name: "a bad handler_failure_fatal", yaml: "on_failure: {shell: fix, handler_failure_fatal: yes please}", wantErr: "commands[0].on_failure.handler_failure_fatal (line 3): expected true or false"},
		{name: "a handler's capture", yaml: "on_failure: {commands: [a], capture: {log: handler_output}}", wantErr: "commands[0].on_failure.capture (line 3): not yet: capturing a handler's output"},
		{name: "commit_required", yaml: "on_failure: {claude: /fix, commit_required: true}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "/fix", Claude: true, CommitRequired: true}, attempts: 1},
		{name: "fail_workflow: true", yaml: "on_failure: {claude: /fix, fail_workflow: true}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "/fix", Claude: true, FailWorkflow: true}, attempts: 1},
		{name: "commands", yaml: "on_failure: {commands: [{shell: a}, b], fail_workflow: true, strategy: recovery}", want: messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "set -e\na\nb", FailWorkflow: true}, attempts: 1},
		{name: "claude and shell together", yaml: "on_failure: {claude: /fix, shell: x}", wantErr: "not yet: both shell and claude in one handler"},
		{name: "claude in a longer list", yaml: "on_failure: [a, \"/fix ${shell.output}\"]", want: messages.OnFailure{Action: messages.OnFailureFallback, Steps: []messages.Step{{Shell: "a"}, {Claude: "/fix ${shell.output}"}}}, attempts: 1},
		{name: "claude in commands", yaml: "on_failure: {commands: [{claude: /fix}, {shell: b}], fail_workflow: true}", want: messages.OnFailure{Action: messages.OnFailureFallback, Steps: []messages.Step{{Claude: "/fix"}, {Shell: "b"}}, FailWorkflow: true}, attempts: 1},
		{name: "a bad command in a list", yaml: "on_failure: [a, \"/fix ${nope}\"]", wantErr: "commands[0].on_failure[1].claude (line 3): ${nope}: unknown reference"},
		{name: "continue is retry_config's", yaml: "on_failure: continue", wantErr: "go in retry_config.on_failure"},
		{name: "unknown handler field", yaml: "on_failure: {shell: x, continue_on_error: true}", wantErr: "commands[0].on_failure.continue_on_error (line 3): not yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := jobspec.Parse([]byte("commands:\n  - shell: build\n    " + tt.yaml + "\n"))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			rc := spec.AgentTemplate[0].RetryConfig
			require.Equal(t, tt.want, *rc.OnFailure)
			require.Equal(t, tt.attempts, *rc.Attempts)
			// The wire form reads back the same.
			b, err := json.Marshal(rc.OnFailure)
			require.NoError(t, err)
			var back messages.OnFailure
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, tt.want, back)
		})
	}
	// jetfleet's own form of a claude fallback.
	spec, err := jobspec.Parse([]byte(`{"items": [1], "agent_template": [{"shell": "x", "retry_config": {"on_failure": {"fallback": {"claude": "/fix ${item}"}}}}]}`))
	require.NoError(t, err)
	require.True(t, spec.AgentTemplate[0].RetryConfig.OnFailure.Claude)
	_, err = jobspec.Parse([]byte(`{"items": [1], "agent_template": [{"shell": "x", "retry_config": {"on_failure": {"fallback": {"claude": "/fix", "command": "y"}}}}]}`))
	require.ErrorContains(t, err, "set one of command (a shell command) and claude")
	// jetfleet's own form of a fallback that reruns its step.
	spec, err = jobspec.Parse([]byte(`{"items": [1], "agent_template": [{"shell": "test -f fixed", "retry_config": {"on_failure": {"fallback": {"command": "touch fixed", "max_attempts": 3, "timeout": "5m", "handler_failure_fatal": true}}}}]}`))
	require.NoError(t, err)
	require.Equal(t, messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "touch fixed", MaxAttempts: 3, HandlerFailureFatal: true, Timeout: messages.Duration(5 * time.Minute)},
		*spec.AgentTemplate[0].RetryConfig.OnFailure)
	_, err = jobspec.Parse([]byte(`{"items": [1], "agent_template": [{"shell": "x", "retry_config": {"on_failure": {"fallback": {"command": "y", "max_attempts": 101, "timeout": "-1s"}}}}]}`))
	require.ErrorContains(t, err, "agent_template[0].retry_config.on_failure.fallback.max_attempts: must be 1 to 100 (the step's runs in one delivery), got 101")
	require.ErrorContains(t, err, `agent_template[0].retry_config.on_failure.fallback.timeout: invalid duration "-1s"`)
}
