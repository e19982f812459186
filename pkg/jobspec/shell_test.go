package jobspec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShellProblems: shell commands whose references bash would evaluate,
// and a job env that would change what the agent sets, are refused with
// every other problem, each with its field path and line; YAML and JSON
// alike.
func TestShellProblems(t *testing.T) {
	const spec = `items: [{id: a, n: 3}]
env: {ITEM_ID: forged, REGION: eu}
agent_template:
  - shell: "[[ ${item.n} -gt 5 ]] && echo big"
  - shell: "echo ${item.n}"
    retry_config:
      on_failure: {fallback: {command: "n=${item.n}; echo $((n + 1))"}}
  - shell: 'echo "fine: ${item.n}" ${attempt}'
    timeout: 5 parsecs
error_policy:
  on_item_failure: {custom: {shell: "let x=${item.n}"}}
reduce:
  - shell: "cat <<'EOF'\n${map.results}\nEOF"
`
	_, err := Parse([]byte(spec))
	got := problems(t, err)
	require.Equal(t, []string{
		`env.ITEM_ID (line 2): reserved: the agent sets ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for every shell step (MAP_* in reduce steps, FAILURE_* in a custom on_item_failure step, JETFLEET_* for itself), and a job may not change them`,
		`agent_template[0].shell (line 4): ${item.n}: cannot be quoted safely: bash evaluates it as arithmetic in [[ ... -gt ... ]], which runs any $(...) in a value such as a[$(cmd)] whatever the quoting; check that it is a number and use the checked copy: n=$(printf '%s\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 1`,
		`agent_template[1].retry_config.on_failure.fallback.command (line 7): ${item.n}: cannot be quoted safely: it is assigned to n, which is used in $((...)) at line 1: bash evaluates arithmetic recursively and runs any $(...) in a value such as a[$(cmd)], whatever the quoting; check that it is a number and assign the checked copy: n=$(printf '%s\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 1`,
		`agent_template[2].timeout (line 9): invalid duration "5 parsecs": unknown unit "parsecs" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`,
		`error_policy.on_item_failure.custom.shell (line 11): ${item.n}: cannot be quoted safely: bash evaluates it as arithmetic in let, which runs any $(...) in a value such as a[$(cmd)] whatever the quoting; check that it is a number and use the checked copy: n=$(printf '%s\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 1`,
		`reduce[0].shell (line 13): ${map.results} (line 2): cannot be quoted safely: it is inside a quoted here-document (<<'EOF'), where nothing is expanded and a value holding the delimiter's line would end it early; write the delimiter unquoted (<<EOF), where the value is expanded from a variable`,
	}, got)

	// JSON, as the API takes it.
	_, err = Parse([]byte(`{"items": [1], "env": {"JOB_ID": "x"}, "agent_template": [{"shell": "printf -v ${item} %s x"}]}`))
	require.Equal(t, []string{
		`env.JOB_ID: reserved: the agent sets ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for every shell step (MAP_* in reduce steps, FAILURE_* in a custom on_item_failure step, JETFLEET_* for itself), and a job may not change them`,
		`agent_template[0].shell: ${item}: cannot be quoted safely: it names a variable in printf -v, and bash evaluates the subscript of a name such as a[$(cmd)] whatever the quoting; use a fixed variable name`,
	}, problems(t, err))
}
