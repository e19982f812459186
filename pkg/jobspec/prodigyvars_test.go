package jobspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// Prodigy's variables as its workflows write them: ${map.results} is the
// JSON in its layout (the path in jetfleet's), a bare ${NAME} of the job's
// env, a reference with a default need not be captured, ${item_total}.
func TestProdigyVariables(t *testing.T) {
	data := []byte(`name: vars
env:
  PROJECT: demo
map:
  input: items.json
  agent_template:
    - shell: "echo ${PROJECT} ${item_index}/${item_total} ${build.success|default:false} ${later:-none}"
reduce:
  - shell: "echo '${map.results}' | jq length; echo ${map.success_rate} '$${map.results}'"
  - shell: "echo ${map.results_file} ${map.results[0].output}"
`)
	spec, err := jobspec.Parse(data)
	require.NoError(t, err)
	require.Equal(t, "echo '${map.results_json}' | jq length; echo ${map.success_rate} '$${map.results}'", spec.Reduce[0].Shell, "Prodigy's ${map.results} is the JSON")
	_, notes, err := jobspec.Explain(data)
	require.NoError(t, err)
	var found bool
	for _, n := range notes {
		if n.Field == "reduce[0].shell" {
			found = true
			require.Contains(t, n.Message, "${map.results} is the map results' JSON, as Prodigy gives it")
		}
	}
	require.True(t, found, "%v", notes)

	jf, err := jobspec.Parse([]byte(`{"items": [{"id": "a"}], "agent_template": [{"shell": "x"}], "reduce": [{"shell": "jq length ${map.results}"}]}`))
	require.NoError(t, err)
	require.Equal(t, "jq length ${map.results}", jf.Reduce[0].Shell, "jetfleet's layout keeps the path")

	spec, err = jobspec.Parse([]byte("commands:\n  - shell: cargo test\n    id: test-step\n  - shell: echo ${test-step.output} ${test-step.exit_code}\n    when: \"${test-step.exit_code} == 0\"\n"))
	require.NoError(t, err)
	require.Equal(t, "test-step", spec.AgentTemplate[0].Capture, "a step's id is a capture of its name")
	require.True(t, spec.AgentTemplate[0].CaptureStreams.ExitCode)
	_, err = jobspec.Parse([]byte("commands:\n  - shell: cargo test\n    id: a\n    capture: b\n"))
	require.ErrorContains(t, err, "commands[0].id (line 3): a step's id names its output (${a.output}), a capture of that name: set one of id and capture, or the same name")

	_, err = jobspec.Parse([]byte("env: {A: x}\ncommands:\n  - shell: echo ${B}\n"))
	require.ErrorContains(t, err, `${B}: unknown reference "B": no earlier step captures it`)
	_, err = jobspec.Parse([]byte("commands:\n  - shell: echo ${x|upper}\n"))
	require.ErrorContains(t, err, `commands[0].shell (line 2): ${x|upper} at offset 5: unknown filter "upper"`)
	_, err = jobspec.Parse([]byte("commands:\n  - shell: echo ${item_total}\n    when: \"${item_total} > 1\"\n"))
	require.NoError(t, err)
}

// ExplainVariables (fleetctl validate --explain): each step's variables
// and where they come from.
func TestExplainVariables(t *testing.T) {
	notes, err := jobspec.ExplainVariables([]byte(`env: {PROJECT: demo}
commands:
  - shell: "cargo test"
    capture: ok
    capture_format: boolean
  - shell: "cargo build"
    on_failure: "/fix"
`))
	require.NoError(t, err)
	require.Len(t, notes, 2)
	require.Equal(t, "commands[0]", notes[0].Field)
	require.Equal(t, 3, notes[0].Line)
	require.Contains(t, notes[0].Message, "reads ${item} and ${item.<field>} (the item), ${item_id}, ${item_index}, ${item_total}")
	require.Contains(t, notes[0].Message, "the job's env: ${env.NAME} and ${NAME} for PROJECT")
	require.NotContains(t, notes[0].Message, "shell.output")
	require.Contains(t, notes[1].Message, "${shell.output} and ${last.output}: the previous step's output")
	require.Contains(t, notes[1].Message, "captured by earlier steps: ${ok} (commands[0], boolean)")
	require.Contains(t, notes[1].Message, "its fallback reads the same, ${shell.output} the failed run's output")
}
