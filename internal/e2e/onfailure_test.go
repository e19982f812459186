package e2e

import (
	"os"
	"path/filepath"
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

// Prodigy's on_failure handlers: a claude handler with max_attempts (the
// step's runs in one delivery, the handler, a stand-in CLI here, after
// each failed run with its output; it fixes nothing, and its success after
// the last run lets the item go on), a string handler (a shell command), a
// list of shell commands, and true (the item goes on). Each item ends
// succeeded.
func TestProdigyOnFailureForms(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	bin, calls, out := t.TempDir(), t.TempDir(), t.TempDir()
	stand := filepath.Join(bin, "claude")
	require.NoError(t, os.WriteFile(stand, []byte(`#!/bin/sh
printf '%s\n' "$@" >> `+calls+`/calls
echo "fixed"
`), 0o700))
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 2, ClaudeCommand: stand, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	spec, err := jobspec.ToJSON([]byte(`name: handlers
commands:
  - shell: "echo try >> ` + out + `/tries; echo 'lint: 3 warnings'; exit 1"
    on_failure:
      claude: "/fix-warnings ${item_id} ${shell.output}"
      max_attempts: 2
      fail_workflow: false
  - shell: "exit 4"
    on_failure: "echo string-handler >> ` + out + `/handlers"
  - shell: "exit 5"
    on_failure:
      - "echo list-1 >> ` + out + `/handlers"
      - "echo list-2 >> ` + out + `/handlers"
  - shell: "exit 6"
    on_failure: true
  - shell: "echo done"
`))
	require.NoError(t, err)
	st := waitJob(t, cl, submit(t, cl, string(spec)), 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)

	tries, err := os.ReadFile(filepath.Join(out, "tries"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(tries), "try"), "max_attempts: 2 runs the step twice")
	got, err := os.ReadFile(filepath.Join(calls, "calls"))
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("--print\n/fix-warnings standard lint: 3 warnings\n", 2), string(got), "the claude handler ran after each failed run, with the prompt")
	handlers, err := os.ReadFile(filepath.Join(out, "handlers"))
	require.NoError(t, err)
	require.Equal(t, "string-handler\nlist-1\nlist-2\n", string(handlers))
}

// A claude fallback needs an agent with Claude Code's CLI, as a claude
// step does: refused at submission with its field when none has it.
func TestClaudeFallbackNeedsAnAgentWithTheCLI(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-claude")
	f := fleettest.RunFleet(t, nil, fleettest.WithAgentConfig(func(_ int, cfg *agent.Config) { cfg.ClaudeCommand = missing }))
	_, err := f.Client.JobSubmit(t.Context(), []byte(`{"items": [{"id": "x"}], "agent_template": [{"shell": "false", "retry_config": {"on_failure": {"fallback": {"claude": "/fix"}}}}]}`))
	var apiErr *messages.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "agent_template[0].retry_config.on_failure.fallback.claude", apiErr.Field)
	require.Contains(t, apiErr.Message, `no agent of pool "default" runs claude steps`)
}
