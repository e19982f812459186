package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func cli(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "NATS_URL" {
			return url
		}
		return ""
	}}
	code = runCLI(context.Background(), env, args)
	return code, out.String(), errb.String()
}

func writeSpec(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "job.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestRunPrintsCountsThatAddUp(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, `
id: cli-run
items: [{id: a}, {id: b}, {id: c}, {id: d}]
agent_template:
  - handler: flaky
    with: {fail_attempts: 1}
    retry_config: {attempts: 2, backoff: fixed, initial_delay: 10ms}
`)
	code, out, errOut := cli(t, "", "run", path, "--agents", "2", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 4, st.Succeeded)
	require.EqualValues(t, 4, st.Retries)
	require.Equal(t, st.Items, st.Succeeded+st.DeadLettered+st.Skipped+st.NotRun+st.Failed)
}

func TestJobCommandsAgainstAFleet(t *testing.T) {
	t.Parallel()
	prov := provision.Config{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}
	f := fleettest.RunFleet(t, agent.Builtins(),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) {
			c.Provision, c.StatusInterval = coordinator.Provision(prov), 20*time.Millisecond
		}),
		fleettest.WithAgentConfig(func(_ int, c *agent.Config) {
			testhooks.UpdateAgent(c, func(h *testhooks.Agent) { h.Provision = prov })
		}))
	url := f.Server.URL()

	path := writeSpec(t, "id: cli-jobs\nitems: [1, 2, 3]\nagent_template: [{handler: noop}]\nretry_budget: 7\n")
	code, out, errOut := cli(t, url, "submit", path, "--wait", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"state": "succeeded"`)

	code, out, _ = cli(t, url, "status", "cli-jobs", "--json")
	require.Equal(t, exitOK, code)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.EqualValues(t, 3, st.Succeeded)

	code, out, _ = cli(t, url, "budget", "cli-jobs", "--json")
	require.Equal(t, exitOK, code)
	var b messages.BudgetStatus
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	require.Equal(t, 7, b.Total)
	require.Zero(t, b.Consumed)

	// A step naming a handler no agent of the pool has is bad input.
	code, _, errOut = cli(t, url, "submit", writeSpec(t, "items: [1]\nagent_template: [{handler: noop}, {handler: nosuch}]\n"), "--wait")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `agent_template[1].handler`)
	require.Contains(t, errOut, `no agent of pool "default" registers handler "nosuch"`)

	code, _, errOut = cli(t, url, "status", "no-such-job")
	require.Equal(t, exitUsage, code, "an unknown job is bad input")
	require.Contains(t, errOut, `no job "no-such-job"`)

	code, _, errOut = cli(t, url, "cancel", "cli-jobs")
	require.Equal(t, exitFailed, code, "a finished job cannot be cancelled")
	require.Contains(t, errOut, "already ended")
	code, _, errOut = cli(t, url, "cancel", "cli-jobs", "--kill")
	require.Equal(t, exitFailed, code, "nor killed: it was not cancelled")
	require.Contains(t, errOut, "already ended")
	code, _, errOut = cli(t, url, "submit", writeSpec(t, "id: cli-kill\nitems: [1]\nagent_template: [{handler: sleep, with: {duration: 10m}}]\n"))
	require.Equal(t, exitOK, code, errOut)
	// The submission is durable and accepted a moment later: until then
	// there is no job to cancel.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if code, _, errOut := cli(t, url, "status", "cli-kill"); code != exitOK {
			return errors.New(errOut)
		}
		return nil
	})
	code, out, errOut = cli(t, url, "cancel", "cli-kill", "--kill", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"state": "cancelled"`)

	code, _, _ = cli(t, url, "status")
	require.Equal(t, exitUsage, code, "JOB is required")

	code, out, errOut = cli(t, url, "list", "--state", "succeeded", "--text", "CLI-")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "cli-jobs")
	code, out, _ = cli(t, url, "list", "--pool", "elsewhere", "--json")
	require.Equal(t, exitOK, code)
	require.JSONEq(t, "[]", out)
	code, _, errOut = cli(t, url, "list", "--limit", "5000")
	require.Equal(t, exitUsage, code, "a page above the maximum is bad input")
	require.Contains(t, errOut, "limit")

	// jobs prune: nothing is old enough under the default retention (7d).
	code, out, errOut = cli(t, url, "jobs", "prune", "--dry-run", "--json")
	require.Equal(t, exitOK, code, errOut)
	var pr messages.PruneReply
	require.NoError(t, json.Unmarshal([]byte(out), &pr))
	require.True(t, pr.DryRun)
	require.Zero(t, pr.Pruned)
	code, _, errOut = cli(t, url, "jobs", "prune", "--older-than", "1m")
	require.Equal(t, exitUsage, code, "below the duplicate windows")
	require.Contains(t, errOut, "older_than")
	code, _, _ = cli(t, url, "jobs", "prune", "--older-than", "soon")
	require.Equal(t, exitUsage, code)
	code, _, _ = cli(t, url, "jobs")
	require.Equal(t, exitUsage, code, "a subcommand is required")
}

// fleetctl submit uploads an input named by an absolute path (it used to
// join it onto the job file's directory), under a name unique to the
// submission; the coordinator keeps its own copy, so submitting the job
// file again after the input changed leaves the accepted job's input as it
// was.
func TestSubmitUploadsTheInputOncePerSubmission(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunFleet(t, agent.Builtins(),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) { c.StatusInterval = 20 * time.Millisecond })).Server
	ctx := context.Background()

	input := filepath.Join(t.TempDir(), "items.json") // not beside the job file
	require.NoError(t, os.WriteFile(input, []byte(`{"items": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}`), 0o644))
	path := writeSpec(t, "id: abs-input\ninput: "+input+"\njson_path: $.items[*]\nagent_template: [{handler: noop}]\n")
	code, out, errOut := cli(t, srv.URL(), "submit", path, "--wait", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.EqualValues(t, 3, st.Succeeded, out)

	names := messages.MustNames("")
	readInput := func() string {
		kv, err := srv.JS().KeyValue(ctx, names.JobsBucket())
		require.NoError(t, err)
		e, err := kv.Get(ctx, "abs-input")
		require.NoError(t, err)
		var rec wire.JobRecord
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		require.True(t, strings.HasPrefix(rec.Spec.Input, "objstore://fleet_inputs/"), rec.Spec.Input)
		rc, err := expand.ObjectStoreOpener(srv.JS())(ctx, rec.Spec.Input)
		require.NoError(t, err)
		defer rc.Close()
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		return string(b)
	}
	before := readInput()
	require.NoError(t, os.WriteFile(input, []byte(`{"items": [{"id": "evil"}]}`), 0o644))
	code, out, errOut = cli(t, srv.URL(), "submit", path)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "already submitted")
	require.Equal(t, before, readInput(), "a second submission changed the accepted job's input")

	// Each submission uploaded under its own name; nothing was replaced.
	uploads, err := srv.JS().ObjectStore(ctx, names.UploadsBucket())
	require.NoError(t, err)
	list, err := uploads.List(ctx)
	if !errors.Is(err, jetstream.ErrNoObjectsFound) {
		require.NoError(t, err)
	}
	for _, o := range list {
		require.NotContains(t, o.Name, "abs-input", "upload names are unique, not the job id")
	}
}

// fleetctl run reads local inputs itself (its coordinator is in-process):
// beside the job file, or anywhere by absolute path.
func TestRunReadsLocalInputs(t *testing.T) {
	t.Parallel()
	elsewhere := filepath.Join(t.TempDir(), "far.json")
	require.NoError(t, os.WriteFile(elsewhere, []byte(`[{"id": "x"}, {"id": "y"}]`), 0o644))
	path := writeSpec(t, "id: run-near\ninput: near.json\nagent_template: [{handler: noop}]\n")
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(path), "near.json"), []byte(`[{"id": "a"}]`), 0o644))
	for _, tt := range []struct {
		spec string
		want int64
	}{
		{path, 1},
		{writeSpec(t, "id: run-far\ninput: "+elsewhere+"\nagent_template: [{handler: noop}]\n"), 2},
	} {
		code, out, errOut := cli(t, "", "run", tt.spec, "--agents", "1", "--json")
		require.Equal(t, exitOK, code, errOut)
		var st messages.JobStatus
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		require.Equal(t, tt.want, st.Succeeded, out)
	}
}

// fleetctl run hosts its coordinator with the settings cmd/coordinator
// reads (envflag.Policy): AD-44's per-workflow cap of 2 lets an item that
// always fails with a network error retry twice, where its attempts: 10
// alone would retry 9 times.
func TestRunReadsTheCoordinatorsEnvironment(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, `
id: cli-ad44-env
items: [{id: a}]
agent_template:
  - shell: "echo 'connection refused' >&2; exit 1"
    retry_config: {attempts: 10, initial_delay: 10ms, max_delay: 10ms, retry_on: [network]}
`)
	runJob := func(env map[string]string) *messages.JobStatus {
		code, out, errOut := cliEnvMap(t, env, "run", path, "--agents", "1", "--json")
		require.Equal(t, exitFailed, code, errOut)
		var st messages.JobStatus
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.EqualValues(t, 1, st.DeadLettered)
		return &st
	}
	st := runJob(map[string]string{"RETRY_BUDGET_PER_WORKFLOW_DEFAULT": "2", "RETRY_BUDGET_PER_WORKFLOW_MAX": "2"})
	require.EqualValues(t, 2, st.Retries)
	require.Equal(t, 2, st.Budget.PerItemMax)
	st = runJob(nil)
	require.EqualValues(t, 9, st.Retries, "attempts: 10 without the settings")

	code, _, errOut := cliEnvMap(t, map[string]string{"RETRY_BUDGET_PER_WORKFLOW_MAX": "two"}, "run", path)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "RETRY_BUDGET_PER_WORKFLOW_MAX")
	code, _, errOut = cliEnvMap(t, map[string]string{"BEST_EFFORT_DEFAULT_DEADLINE_SECONDS": "-1"}, "run", path)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "BEST_EFFORT_DEFAULT_DEADLINE_SECONDS")
}

// fleetctl run --profile chooses the job's profile, over env; its local
// agents read env files and file secrets beside the job file; an unknown
// profile is refused, naming it.
func TestRunProfile(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, `
id: cli-profile
items: [{id: a}]
env:
  MODE: plain
  PAR: "1"
env_files: [job.env]
secrets:
  TOKEN: {provider: file, key: token.txt}
profiles:
  dev: {description: "local runs", MODE: dev-mode, PAR: "3"}
max_parallel: ${PAR}
agent_template:
  - shell: 'test "$MODE" = dev-mode && test "$TOKEN" = s3cret && test "$REGION" = eu && echo "ok $TOKEN"'
    retry_config: {attempts: 1}
`)
	dir := filepath.Dir(path)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.env"), []byte("REGION=eu\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token.txt"), []byte("s3cret\n"), 0o600))
	code, out, errOut := cli(t, "", "run", path, "--agents", "1", "--profile", "dev", "--json")
	require.Equal(t, exitOK, code, out+errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.EqualValues(t, 1, st.Succeeded, out)

	code, out, errOut = cli(t, "", "run", path, "--agents", "1", "--json")
	require.Equal(t, exitFailed, code, "without the profile MODE is plain: "+out+errOut)

	code, out, errOut = cli(t, "", "run", path, "--profile", "prod")
	require.Equal(t, exitUsage, code)
	require.Contains(t, out+errOut, `profile: unknown profile "prod" (the job defines dev)`)
}

// validate --explain says where each env variable comes from.
func TestValidateExplainsTheEnvironment(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, `
items: [{id: a}]
env:
  MODE: plain
  CORES: {command: nproc, cache: true}
secrets:
  TOKEN: "${env:CI_TOKEN}"
agent_template:
  - shell: 'echo $MODE $CORES $TOKEN'
`)
	code, out, errOut := cli(t, "", "validate", path, "--explain")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `note: env.CORES (line 5): comes from computed by the command "nproc" on the agent that runs the item (cache: once per agent for the job)`)
	require.Contains(t, out, `note: env.MODE (line 4): comes from the job's env, as written`)
	require.Contains(t, out, `note: secrets.TOKEN (line 7): comes from a secret: the agent's environment variable CI_TOKEN`)
}

// submit --profile refuses an unknown profile before connecting.
func TestSubmitUnknownProfile(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, "items: [{id: a}]\nprofiles: {dev: {MODE: d}}\nagent_template: [{shell: 'echo $MODE'}]\n")
	code, out, errOut := cli(t, "", "submit", path, "--profile", "prod")
	require.Equal(t, exitUsage, code)
	require.Contains(t, out+errOut, `profile: unknown profile "prod" (the job defines dev)`)
}
