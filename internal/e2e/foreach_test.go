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

// stepsFleet starts a server, a coordinator and one agent (with a
// stand-in claude CLI that records its prompts in calls) for the step-kind
// tests.
func stepsFleet(t *testing.T) (*fleettest.Server, string) {
	t.Helper()
	bin, calls := t.TempDir(), t.TempDir()
	stand := filepath.Join(bin, "claude")
	require.NoError(t, os.WriteFile(stand, []byte("#!/bin/sh\nprintf '%s' \"$2\" > "+calls+"/$$\necho claude-ran\n"), 0o700))
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 4, ClaudeCommand: stand, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	return srv, calls
}

// recorded returns the prompts the stand-in claude CLI was called with,
// sorted.
func recorded(t *testing.T, calls string) []string {
	t.Helper()
	entries, err := os.ReadDir(calls)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(calls, e.Name()))
		require.NoError(t, err)
		out = append(out, string(data))
	}
	sort.Strings(out)
	return out
}

// A foreach over a command's output lines runs its body once per line, in
// the item's directory, with ${item}, ${index} and ${total}; a claude step
// in the body is called once per element; a list with parallel runs each
// element once too.
func TestForeachOverCommandLines(t *testing.T) {
	t.Parallel()
	srv, calls := stepsFleet(t)
	cl := client(t, srv)
	spec, err := jobspec.ToJSON([]byte(`name: foreach-lines
commands:
  - shell: "printf 'alpha\n\n  beta \ngamma\n' > names.txt"
  - foreach:
      foreach: "cat names.txt"
      do:
        - shell: "echo \"${item} ${index}/${total}\" >> runs.txt"
        - claude: "/describe ${item}"
  - foreach:
      foreach: ["x", "y", "z", "w"]
      parallel: 2
      max_items: 3
      do:
        - shell: "touch done-${item}"
  - shell: "cat runs.txt; ls done-* | tr '\n' ' '"
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	res := jobResults(t, srv.JS(), id)
	require.Len(t, res, 1)
	require.Equal(t, "alpha 0/3\nbeta 1/3\ngamma 2/3\ndone-x done-y done-z ", res[0].Output, "each body ran once per element, in order")
	require.Equal(t, []string{"/describe alpha", "/describe beta", "/describe gamma"}, recorded(t, calls))
}

// An element that fails ends the foreach step, which fails naming it;
// with continue_on_error every element runs and the step succeeds, its
// output saying which element failed, as Prodigy counts them.
func TestForeachFailures(t *testing.T) {
	t.Parallel()
	srv, _ := stepsFleet(t)
	cl := client(t, srv)
	body := `
      do:
        - shell: "echo ${item} >> runs; test ${item} != b"
  - shell: "cat runs | tr '\n' ' '"
`
	spec, err := jobspec.ToJSON([]byte("name: foreach-stop\ncommands:\n  - foreach:\n      foreach: [a, b, c]" + body))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, 1)
	require.Contains(t, entries[0].Entry.Error, "element 1 (b)")

	spec, err = jobspec.ToJSON([]byte("name: foreach-continue\ncommands:\n  - foreach:\n      foreach: [a, b, c]\n      continue_on_error: true" + body))
	require.NoError(t, err)
	id = submit(t, cl, string(spec))
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	res := jobResults(t, srv.JS(), id)
	require.Len(t, res, 1)
	require.Equal(t, "a b c ", res[0].Output, "every element ran")
}

// on_exit_code runs the handler of the code the command exits with, after
// the step: a failed step stays failed; a succeeded one's handler reads its
// output as ${shell.output} (and as the variable the step captures).
func TestOnExitCode(t *testing.T) {
	t.Parallel()
	srv, calls := stepsFleet(t)
	cl := client(t, srv)
	marks := t.TempDir()
	spec, err := jobspec.ToJSON([]byte(`name: exit-codes
commands:
  - shell: "echo fine"
    capture_output: report
    on_exit_code:
      0: "echo ${report} > ` + marks + `/zero"
      1: "touch ` + marks + `/one"
  - shell: "echo broken; exit 3"
    on_exit_code:
      3: "/explain ${shell.output}"
      4: "touch ` + marks + `/four"
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "exit 3 fails the step: %+v", st)
	data, err := os.ReadFile(filepath.Join(marks, "zero"))
	require.NoError(t, err)
	require.Equal(t, "fine\n", string(data))
	for _, f := range []string{"one", "four"} {
		_, err := os.Stat(filepath.Join(marks, f))
		require.ErrorIs(t, err, os.ErrNotExist, "the handler of another code did not run")
	}
	require.Equal(t, []string{"/explain broken"}, recorded(t, calls))
}

// on_failure with fail_workflow: true runs its handler, then the step
// fails (the standard workflow's job with it); with fail_workflow: false a
// handler that succeeds lets the workflow go on.
func TestOnFailureFailWorkflow(t *testing.T) {
	t.Parallel()
	srv, _ := stepsFleet(t)
	cl := client(t, srv)
	for _, fail := range []bool{true, false} {
		marks := t.TempDir()
		fw := "false"
		if fail {
			fw = "true"
		}
		spec, err := jobspec.ToJSON([]byte(`name: fail-workflow
commands:
  - shell: "false"
    on_failure:
      shell: "touch ` + marks + `/handled"
      fail_workflow: ` + fw + `
  - shell: "touch ` + marks + `/after"
`))
		require.NoError(t, err)
		id := submit(t, cl, string(spec))
		st := waitJob(t, cl, id, 60*time.Second)
		_, err = os.Stat(filepath.Join(marks, "handled"))
		require.NoError(t, err, "the handler ran")
		_, err = os.Stat(filepath.Join(marks, "after"))
		if fail {
			require.Equal(t, messages.StateFailed, st.State, "%+v", st)
			require.ErrorIs(t, err, os.ErrNotExist, "the workflow stopped")
			entries := dlqEntries(t, cl, id)
			require.Len(t, entries, 1)
			require.True(t, strings.Contains(entries[0].Entry.Error, "fail_workflow: true"), entries[0].Entry.Error)
		} else {
			require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
			require.NoError(t, err, "the workflow went on")
		}
	}
}

// A job using a step kind that no agent of its pool announces is refused
// at submission with the field, as an unknown handler is.
func TestStepKindsNeedCapableAgents(t *testing.T) {
	t.Parallel()
	f := fleettest.RunFleet(t, nil)
	_, err := f.Client.JobSubmit(t.Context(), []byte(`{"pool": "default", "items": [{"id": "x"}], "agent_template": [{"shell": "true"}, {"foreach": {"items": ["a"], "do": [{"shell": "true"}]}}]}`))
	require.NoError(t, err, "this tree's agents run foreach steps")
}

// A list of handler commands with a claude command in it runs them in
// turn when the step gives up, each reading the failed run's output; when
// they succeed the workflow goes on.
func TestHandlerListWithClaude(t *testing.T) {
	t.Parallel()
	srv, calls := stepsFleet(t)
	cl := client(t, srv)
	marks := t.TempDir()
	spec, err := jobspec.ToJSON([]byte(`name: handler-list
commands:
  - shell: "echo broken; exit 1"
    on_failure:
      - "echo first > ` + marks + `/one"
      - "/fix ${shell.output}"
      - shell: "test -s ` + marks + `/one && touch ` + marks + `/three"
  - shell: "touch ` + marks + `/after"
`))
	require.NoError(t, err)
	id := submit(t, cl, string(spec))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	for _, f := range []string{"one", "three", "after"} {
		_, err := os.Stat(filepath.Join(marks, f))
		require.NoError(t, err, f)
	}
	require.Equal(t, []string{"/fix broken"}, recorded(t, calls))
}
