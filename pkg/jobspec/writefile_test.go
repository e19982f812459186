package jobspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// A write_file step as Prodigy writes it: its fields reach the wire form,
// and what can be refused at submission is refused with its field.
func TestWriteFileStep(t *testing.T) {
	spec, err := jobspec.Parse([]byte(`commands:
  - shell: "echo 3"
    capture: count
  - write_file:
      path: "out/${item.name}.json"
      content: '{"name": "${item.name}", "count": ${count}}'
      format: json
      mode: "0600"
      create_dirs: true
  - shell: "cat out/*.json"
`))
	require.NoError(t, err)
	w := spec.AgentTemplate[1].WriteFile
	require.NotNil(t, w)
	require.Equal(t, "out/${item.name}.json", w.Path)
	require.Equal(t, "json", w.Format)
	require.Equal(t, "0600", w.Mode)
	require.True(t, w.CreateDirs)

	for _, c := range []struct{ step, want string }{
		{`{path: /etc/passwd, content: x}`, `commands[0].write_file.path (line 2): "/etc/passwd" is absolute`},
		{`{path: "a/../../b", content: x}`, `commands[0].write_file.path (line 2): "a/../../b" leads out of the item's directory (..)`},
		{`{path: "${item.a}/../../x", content: x}`, `leads out of the item's directory`},
		{`{path: "", content: x}`, `commands[0].write_file.path (line 2): must not be empty`},
		{`{path: a.json, content: "{not json", format: json}`, `commands[0].write_file.content (line 2): content is not valid JSON (format: json)`},
		{`{path: a.yml, content: "a: [b", format: yaml}`, `content is not valid YAML (format: yaml)`},
		{`{path: a, content: x, format: jsn}`, `commands[0].write_file.format (line 2): unknown format "jsn" (use text, json, yaml)`},
		{`{path: a, content: x, mode: "0999"}`, `commands[0].write_file.mode (line 2): "0999" is not an octal file mode`},
		{`{path: a, content: x, mode: "01777"}`, `is not an octal file mode`},
		{`{path: a, content: "${nope}"}`, `${nope}: unknown reference "nope"`},
	} {
		_, err := jobspec.Parse([]byte("commands:\n  - write_file: " + c.step + "\n"))
		require.ErrorContains(t, err, c.want, c.step)
	}
	_, err = jobspec.Parse([]byte("commands:\n  - write_file: {path: a, content: x}\n    shell: echo\n"))
	require.ErrorContains(t, err, "set only one of shell, handler, claude or write_file")
	_, err = jobspec.Parse([]byte("commands:\n  - write_file: {path: a, content: x}\n    capture: c\n"))
	require.ErrorContains(t, err, "commands[0].capture (line 3): not with write_file")
	// Content with references is checked when it is written: its values
	// are only known then.
	_, err = jobspec.Parse([]byte("commands:\n  - write_file: {path: a.json, content: '{\"a\": ${item.a}', format: json}\n"))
	require.NoError(t, err)
}

// In Prodigy's layout a reduce's ${map.results} is the JSON, in a
// write_file's content as in a command (Prodigy's reduce writes it to a
// file that way).
func TestWriteFileMapResults(t *testing.T) {
	spec, err := jobspec.Parse([]byte(`name: r
mode: mapreduce
map:
  input: items.json
  agent_template:
    - shell: "echo ${item.id}"
reduce:
  - write_file:
      path: ".out/map-results.json"
      content: "${map.results}"
      format: json
      create_dirs: true
`))
	require.NoError(t, err)
	require.Equal(t, "${map.results_json}", spec.Reduce[0].WriteFile.Content)
	_, err = jobspec.Parse([]byte("items: [a]\nagent_template:\n  - write_file: {path: a, content: '${map.results}'}\n"))
	require.ErrorContains(t, err, "${map.*} references are only allowed in reduce steps")
}
