package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// A here-document reads an item's value and a captured one, as Prodigy's
// examples write it (cat << EOF ... ${x} ... EOF): hostile values arrive
// byte for byte and run nothing.
func TestHeredocValues(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	out := t.TempDir()
	hostile := "it's \"$(touch " + filepath.Join(out, "PWNED") + ")\" `touch " + filepath.Join(out, "PWNED2") + "`\nEOF\ntouch " + filepath.Join(out, "PWNED3") + "\n$HOME \\"
	item, err := json.Marshal(map[string]string{"id": "h1", "v": hostile})
	require.NoError(t, err)
	spec, err := jobspec.Parse([]byte(`
name: heredoc
map:
  items: [` + string(item) + `]
  agent_template:
    - shell: "printf '%s' ${item.v}"
      capture: captured
    - shell: |
        cat > ` + filepath.Join(out, "report.txt") + ` << EOF
        item: ${item.v}
        captured: "${captured}"
        EOF
`))
	require.NoError(t, err)
	spec.ID = "heredoc"
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 1, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	st := waitJob(t, cl, submit(t, cl, string(body)), 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	got, err := os.ReadFile(filepath.Join(out, "report.txt"))
	require.NoError(t, err)
	require.Equal(t, "item: "+hostile+"\ncaptured: \""+hostile+"\"\n", string(got))
	for _, f := range []string{"PWNED", "PWNED2", "PWNED3"} {
		require.NoFileExists(t, filepath.Join(out, f))
	}
}

// Prodigy's variables on a fleet: ${item_index}/${item_total}, a bare
// ${NAME} of the job's env, a step's output by its id (${project.output}), a default for what no step captured, and in
// its reduce ${map.results} as the JSON (piped to jq) with
// ${map.success_rate} and the path under ${map.results_file}. (printf, not
// Prodigy's echo: dash's echo decodes the \n escapes of the JSON.)
func TestProdigyVariablesRun(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	out := t.TempDir()
	spec, err := jobspec.Parse([]byte(`
name: vars
env:
  PROJECT: demo
map:
  items: [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}]
  agent_template:
    - shell: "echo ${PROJECT}"
      id: project
    - shell: "test ${item.id} != d || exit 1; echo ${project.output} ${item_index}/${item_total} ${build.success|default:unbuilt} ${item.id|length} ${project.exit_code}"
reduce:
  - shell: "printf '%s\\n' '${map.results}' | jq -r '[.[] | select(.outcome == \"succeeded\") | .output] | sort | join(\",\")' > ` + out + `/reduce.txt; echo ${map.success_rate} ${map.successful}/${map.total} >> ` + out + `/reduce.txt; test -s ${map.results_file}"
error_policy:
  on_item_failure: skip
`))
	require.NoError(t, err)
	spec.ID = "prodigy-vars"
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 2, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	st := waitJob(t, cl, submit(t, cl, string(body)), 60*time.Second)
	require.EqualValues(t, 3, st.Succeeded, "%+v", st)
	require.NotNil(t, st.Reduce)
	got, err := os.ReadFile(filepath.Join(out, "reduce.txt"))
	require.NoError(t, err, "reduce: %+v", st.Reduce)
	require.Equal(t, "demo 0/4 unbuilt 1 0\n,demo 1/4 unbuilt 1 0\n,demo 2/4 unbuilt 1 0\n\n75 3/4\n", string(got))
}
