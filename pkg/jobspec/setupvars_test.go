package jobspec_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// What a setup step captures, the map and reduce steps read (their
// references and conditions validate); a name no step captures is still
// refused, and the setup does not see the map's captures.
func TestSetupCapturesReachMapAndReduce(t *testing.T) {
	data := []byte(`name: setupvars
setup:
  - shell: echo v1.2
    capture: version
  - shell: echo '{"branch":"main","n":3}'
    capture: info
    capture_format: json
map:
  input: items.json
  agent_template:
    - shell: echo ${version} ${info.branch} ${item.id}
    - shell: echo ${info.n}
      when: "${info.n} > 2"
reduce:
  - shell: echo ${version} ${map.successful}
`)
	spec, err := jobspec.Parse(data)
	require.NoError(t, err)
	require.Equal(t, "version", spec.Setup.Commands[0].Capture)
	notes, err := jobspec.ExplainVariables(data)
	require.NoError(t, err)
	var mapNote string
	for _, n := range notes {
		if n.Field == "map.agent_template[0]" {
			mapNote = n.Message
		}
	}
	require.Contains(t, mapNote, "captured by earlier steps: ${version} (setup[0], string), ${info} (setup[1], json)", "--explain says where the setup's variables come from")

	bad := func(yaml string) string {
		_, err := jobspec.Parse([]byte(yaml))
		require.Error(t, err)
		return err.Error()
	}
	require.Contains(t, bad(strings.Replace(string(data), "${version} ${map.successful}", "${nope}", 1)),
		`reduce[0].shell (line 15): ${nope}: unknown reference "nope"`)
	require.Contains(t, bad(`name: x
setup:
  - shell: echo ${later}
map:
  input: items.json
  agent_template:
    - shell: echo 1
      capture: later
`), `setup[0].shell (line 3): ${later}: unknown reference "later"`)
}

// Prodigy's capture_outputs block: each variable is capture: NAME on the
// setup command it names, which the map steps then read; an index out of
// range, or a command that already captures, is refused.
func TestSetupCaptureOutputs(t *testing.T) {
	const head = `mode: mapreduce
setup:
  capture_outputs:
`
	const tail = `  commands:
    - shell: echo 3
    - shell: echo main
map:
  input: items.json
  agent_template:
    - shell: echo ${COUNT} ${BRANCH}
`
	spec, err := jobspec.Parse([]byte(head + "    COUNT: 0\n    BRANCH: {command_index: 1}\n" + tail))
	require.NoError(t, err)
	require.Equal(t, "COUNT", spec.Setup.Commands[0].Capture)
	require.Equal(t, "BRANCH", spec.Setup.Commands[1].Capture)

	_, err = jobspec.Parse([]byte(head + "    COUNT: 2\n    BRANCH: 1\n" + tail))
	require.ErrorContains(t, err, "setup.capture_outputs.COUNT (line 4): expected the index of a setup command (0 to 1), got number 2")
	_, err = jobspec.Parse([]byte(head + "    COUNT: 0\n    BRANCH: 0\n" + tail))
	require.ErrorContains(t, err, "a command captures into one variable")
}
