package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A claude step of Prodigy's layout calls Claude Code's CLI (a stand-in
// here) once per item, headless, with the prompt as written and its
// references filled in, in the item's directory; its output is the step's.
func TestClaudeSteps(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	bin, calls := t.TempDir(), t.TempDir()
	stand := filepath.Join(bin, "claude")
	require.NoError(t, os.WriteFile(stand, []byte(`#!/bin/sh
f=`+calls+`/$$
printf '%s\n' "$@" > "$f"
pwd >> "$f"
echo "fixed it"
`), 0o700))
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 4, ClaudeCommand: stand, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)

	spec, err := jobspec.ToJSON([]byte(`name: claude-fix
mode: mapreduce
map:
  items: [{id: a, path: "src/a b.rs"}, {id: b, path: "it's.rs"}, {id: c, path: "$(rm -rf /)"}]
  agent_template:
    - claude: "/fix ${item.path} --reason 'lint'"
    - shell: test "$(ls ` + calls + ` | wc -l)" -ge 1
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 3, st.Succeeded, "%+v", st)

	entries, err := os.ReadDir(calls)
	require.NoError(t, err)
	require.Len(t, entries, 3, "one call per item")
	var prompts []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(calls, e.Name()))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		require.Len(t, lines, 3, "--print, the prompt as one argument, the directory: %q", data)
		require.Equal(t, "--print", lines[0])
		require.Contains(t, lines[2], "jetfleet-items", "run in the item's directory")
		prompts = append(prompts, lines[1])
	}
	sort.Strings(prompts)
	require.Equal(t, []string{"/fix $(rm -rf /) --reason 'lint'", "/fix it's.rs --reason 'lint'", "/fix src/a b.rs --reason 'lint'"}, prompts)
}

// A job with claude steps whose pool has agents, none with the CLI, is
// refused at submission with the step's field.
func TestClaudeStepsNeedAnAgentWithTheCLI(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-claude")
	f := fleettest.RunFleet(t, nil, fleettest.WithAgentConfig(func(_ int, cfg *agent.Config) { cfg.ClaudeCommand = missing }))
	_, err := f.Client.JobSubmit(t.Context(), []byte(`{"items": [{"id": "x"}], "agent_template": [{"shell": "true"}, {"claude": "/fix"}]}`))
	var apiErr *messages.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "agent_template[1].claude", apiErr.Field)
	require.Contains(t, apiErr.Message, `agent_template[1].claude: no agent of pool "default" runs claude steps`)

	// A setup's claude step too.
	spec, err := jobspec.ToJSON([]byte("mode: mapreduce\nsetup:\n  - claude: /list-targets\nmap:\n  input: items.json\n  agent_template: [{shell: \"true\"}]\n"))
	require.NoError(t, err)
	_, err = f.Client.JobSubmit(t.Context(), spec)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "setup.commands[0].claude", apiErr.Field)
}
