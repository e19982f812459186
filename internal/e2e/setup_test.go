package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// setupFleet starts a server (with opts), a coordinator and two agents,
// each with a work directory of its own, and returns a client.
func setupFleet(t *testing.T, opts ...fleettest.Option) *jfclient.Client {
	t.Helper()
	srv := fleettest.RunServer(t, opts...)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 4, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	return client(t, srv)
}

// submitYAML parses a workflow as fleetctl does and submits it as JSON.
func submitYAML(t *testing.T, cl *jfclient.Client, id, workflow string) string {
	t.Helper()
	spec, err := jobspec.Parse([]byte(workflow))
	require.NoError(t, err)
	spec.ID = id
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	return submit(t, cl, string(body))
}

// A workflow in Prodigy's layout whose setup writes the map input: the
// setup item runs on an agent, the coordinator expands the 8 items it
// wrote, the filter keeps 6 of them, one fails (no retry_config: it runs
// once and is dead-lettered), and the reduce sees the map's counts.
func TestSetupWritesMapInput(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submitYAML(t, cl, "setup-writes-input", `
name: numbers from setup
mode: mapreduce
setup:
  - shell: "echo preparing"
  - shell: |
      list='['
      for n in 1 2 3 4 5 6 7; do list="$list{\"n\": $n},"; done
      printf '%s{"n": 8}]\n' "$list" > numbers.json
map:
  input: numbers.json
  json_path: "$[*]"
  filter: "n > 2"
  agent_template:
    - shell: "test ${item.n} -ne 5 && echo ${item.n} >> `+out+`/seen"
reduce:
  - shell: "echo ${map.successful} of ${map.total} > `+out+`/summary"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason, "%+v", st)
	require.EqualValues(t, 6, st.Items, "n > 2 of the 8 the setup wrote")
	require.EqualValues(t, 5, st.Succeeded)
	require.EqualValues(t, 1, st.DeadLettered)
	require.Equal(t, messages.PhaseDone, st.Phase)
	require.NotNil(t, st.Setup)
	require.Equal(t, messages.OutcomeSucceeded, st.Setup.State)
	require.Positive(t, st.Setup.InputBytes)
	require.NotNil(t, st.Reduce)
	require.Equal(t, messages.OutcomeSucceeded, st.Reduce.State)

	seen := lines(t, filepath.Join(out, "seen"))
	sort.Strings(seen)
	require.Equal(t, []string{"3", "4", "6", "7", "8"}, seen)
	summary, err := os.ReadFile(filepath.Join(out, "summary"))
	require.NoError(t, err)
	require.Equal(t, "5 of 6\n", string(summary))
}

// A setup step that fails fails the job before any item is published: the
// status names the step, and keeps its error.
func TestSetupFailureFailsJob(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submitYAML(t, cl, "setup-fails", `
mode: mapreduce
setup:
  - shell: "echo cloning"
  - shell: "echo 'the repository is not reachable' >&2; exit 3"
map:
  input: never.json
  agent_template:
    - shell: "touch `+out+`/ran"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.Equal(t, messages.PhaseDone, st.Phase)
	require.Contains(t, st.CompletionReason, "setup_failed: step 2 (setup-2)")
	require.Contains(t, st.CompletionReason, "the repository is not reachable")
	require.NotNil(t, st.Setup)
	require.Equal(t, messages.OutcomeFailed, st.Setup.State)
	require.Equal(t, "2 (setup-2)", st.Setup.Step)
	require.Contains(t, st.Setup.Error, "the repository is not reachable")
	require.Zero(t, st.Items)
	require.NoFileExists(t, filepath.Join(out, "ran"))
}

// map.input given as a command: it runs on an agent, and its output, one
// item per line, becomes the items ({"item": line}, as Prodigy reads it).
func TestInputCommandItems(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submitYAML(t, cl, "input-command", `
mode: mapreduce
map:
  input: "printf 'north\nsouth\n\neast\nwest\n'"
  agent_template:
    - shell: "echo ${item.item} >> `+out+`/seen"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 4, st.Items, "the empty line is no item")
	require.EqualValues(t, 4, st.Succeeded)
	seen := lines(t, filepath.Join(out, "seen"))
	sort.Strings(seen)
	require.Equal(t, []string{"east", "north", "south", "west"}, seen)

	// JSON output is read through json_path.
	id = submitYAML(t, cl, "input-command-json", `
mode: mapreduce
map:
  input: "echo '{\"jobs\": [{\"k\": \"x\"}, {\"k\": \"y\"}]}'"
  json_path: "$.jobs[*]"
  agent_template:
    - shell: "echo ${item.k} >> `+out+`/json"
`)
	st = waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 2, st.Succeeded)
}

// A setup that leaves more than a result message can carry fails the job
// with the bound in its reason, rather than truncating the items.
func TestSetupInputTooLarge(t *testing.T) {
	t.Parallel()
	cl := setupFleet(t, fleettest.WithConfig(func(o *server.Options) { o.MaxPayload = 256 << 10 }))
	id := submitYAML(t, cl, "setup-too-large", `
mode: mapreduce
setup:
  - shell: "head -c 300000 /dev/zero | tr '\\0' 'x' > big.json"
map:
  input: big.json
  agent_template:
    - shell: "true"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.Contains(t, st.CompletionReason, "setup_failed")
	require.Contains(t, st.CompletionReason, "input big.json is more than")
	require.Contains(t, st.CompletionReason, "the limit is 244736 (the server's max_payload 262144 less 17408 for the rest of the result)")
	require.NotContains(t, st.CompletionReason, "step", "its steps succeeded")
	require.Zero(t, st.Items)
}

// lines reads a file's non-empty lines.
func lines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Fields(string(data))
}

// The setup item is durable: the coordinator that published it is killed
// while it runs, the next one takes over the job in phase setup and
// expands the items from the setup's result, which came in while no
// coordinator led. The setup ran once; its phase shows in the status.
func TestSetupSurvivesCoordinatorKill(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	srv := fleettest.RunServer(t)
	cfg := func(holder string) coordinator.Config {
		return coordinator.Config{Provision: coordinator.Provision(calmProvision), Holder: holder, LeaseTTL: 2 * time.Second}
	}
	first := startCoordinator(t, srv.URL(), cfg("c1"))
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 4, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	id := submitYAML(t, cl, "setup-failover", `
mode: mapreduce
setup:
  - shell: |
      echo run >> `+out+`/setup-runs
      touch `+out+`/started
      while [ ! -f `+out+`/go ]; do sleep 0.05; done
      echo '[{"w": "a"}, {"w": "b"}, {"w": "c"}]' > words.json
map:
  input: words.json
  agent_template:
    - shell: "echo ${item.w} >> `+out+`/seen"
`)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(out, "started")); err != nil {
			return err
		}
		return nil
	})
	st, err := cl.JobStatus(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, messages.PhaseSetup, st.Phase)
	require.Equal(t, messages.StateRunning, st.State)
	require.Equal(t, "pending", st.Setup.State)

	first.kill(t)
	require.NoError(t, os.WriteFile(filepath.Join(out, "go"), nil, 0o600)) // the setup ends while no coordinator leads
	startCoordinator(t, srv.URL(), cfg("c2"))

	st = waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 3, st.Items)
	require.EqualValues(t, 3, st.Succeeded)
	require.Equal(t, []string{"run"}, lines(t, filepath.Join(out, "setup-runs")), "the setup ran once")
	seen := lines(t, filepath.Join(out, "seen"))
	sort.Strings(seen)
	require.Equal(t, []string{"a", "b", "c"}, seen)
}

// An agent killed while it runs the setup leaves the setup item to
// another after AckWait, which runs it again from its first step.
//
// The crash timeout is calmProvision's 30 s, not testProvision's 2 s: an
// agent sends InProgress only while a step runs, and on a loaded machine
// the rest of a delivery (reading the job before the step; reporting the
// result and waiting for its PubAck before the ack, after it) took more
// than 2 s, a live agent's delivery came back, and the setup ran three
// times. The victim's delivery still comes back only through AckWait, up
// to 30 s after its last InProgress; the test waits for it, in parallel
// with the others.
func TestSetupSurvivesAgentKill(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	agentCfg := func(name string) agent.Config {
		return testhooks.WithAgent(agent.Config{Name: name, Concurrency: 4, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision})
	}
	victim := startAgent(t, srv.URL(), agentCfg("victim"), nil)
	cl := client(t, srv)
	id := submitYAML(t, cl, "setup-agent-kill", `
mode: mapreduce
setup:
  - shell: |
      echo run >> `+out+`/setup-runs
      touch `+out+`/started
      while [ ! -f `+out+`/go ]; do sleep 0.05; done
      echo '[{"w": "x"}, {"w": "y"}]' > words.json
map:
  input: words.json
  agent_template:
    - shell: "echo ${item.w} >> `+out+`/seen"
`)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		_, err := os.Stat(filepath.Join(out, "started"))
		return err
	})
	victim.kill(t)
	require.NoError(t, os.WriteFile(filepath.Join(out, "go"), nil, 0o600))
	startAgent(t, srv.URL(), agentCfg("heir"), nil)

	st := waitJob(t, cl, id, 90*time.Second) // AckWait and the runs
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 2, st.Succeeded)
	require.Equal(t, "heir", st.Setup.Agent)
	require.Equal(t, []string{"run", "run"}, lines(t, filepath.Join(out, "setup-runs")), "killed once, run again once")
}

// A job cancelled with kill during its setup ends cancelled with no items,
// and its running setup step is terminated: the agent's one slot is free
// for the next job.
func TestSetupCancelKill(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 1, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	id := submitYAML(t, cl, "setup-cancel", `
mode: mapreduce
setup:
  - shell: |
      touch `+out+`/started
      while true; do sleep 0.05; done
map:
  input: never.json
  agent_template:
    - shell: "touch `+out+`/ran"
`)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		_, err := os.Stat(filepath.Join(out, "started"))
		return err
	})
	st, err := cl.JobCancel(t.Context(), id, jfclient.WithKill())
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.StateCancelled, st.State)
	require.Equal(t, messages.PhaseDone, st.Phase)
	require.Equal(t, messages.StateCancelled, st.Setup.State)
	require.Zero(t, st.Items)

	next := submit(t, cl, `{"items": [{"id": "after"}], "agent_template": [{"shell": "true"}]}`)
	require.Equal(t, messages.StateSucceeded, waitJob(t, cl, next, 30*time.Second).State, "the killed setup freed the agent's slot")
	require.NoFileExists(t, filepath.Join(out, "ran"))
}

// A setup beside inline items (jetfleet's layout) runs before them and
// leaves no input: the items are the spec's.
func TestSetupWithInlineItems(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submit(t, cl, `{"id": "setup-inline", "setup": {"commands": [{"shell": "echo ready > `+out+`/ready"}]},
		"items": [{"id": "a"}, {"id": "b"}],
		"agent_template": [{"shell": "cat `+out+`/ready && echo ${item.id} >> `+out+`/seen"}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 2, st.Succeeded)
	require.Zero(t, st.Setup.InputBytes)
	seen := lines(t, filepath.Join(out, "seen"))
	sort.Strings(seen)
	require.Equal(t, []string{"a", "b"}, seen)
}

// not_before holds a job's setup as it holds its items.
func TestSetupHeldUntilNotBefore(t *testing.T) {
	t.Parallel()
	cl := setupFleet(t)
	id := submit(t, cl, `{"id": "setup-later", "not_before": "1500ms", "setup": {"commands": [{"shell": "true"}]},
		"items": [{"id": "a"}], "agent_template": [{"shell": "true"}]}`)
	var st *messages.JobStatus
	fleettest.WaitFor(t, 10*time.Second, func() (err error) {
		st, err = cl.JobStatus(t.Context(), id) // accepted through the durable intake
		return err
	})
	require.Equal(t, messages.StateScheduled, st.State)
	require.Equal(t, messages.PhaseSetup, st.Phase)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.NotNil(t, st.StartedAt)
	require.GreaterOrEqual(t, st.StartedAt.Sub(st.SubmittedAt), 1400*time.Millisecond, "started at not_before")
}
