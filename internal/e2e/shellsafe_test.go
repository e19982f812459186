package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// TestUnsafeShellStepsRefused: a shell step where bash would evaluate an
// item's value (arithmetic), and a job env that would override ITEM_ID, are
// refused at submission with their field paths, on the API and on the
// durable intake; an ordinary job submitted afterwards succeeds.
func TestUnsafeShellStepsRefused(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	ctx := context.Background()

	const unsafe = `{"id": "unsafe", "items": [{"id": "a", "n": "a[$(touch /tmp/pwned)]"}], "env": {"ITEM_ID": "forged"},
		"agent_template": [{"shell": "echo ok"}, {"shell": "[[ ${item.n} -gt 5 ]] && echo big"}],
		"error_policy": {"on_item_failure": {"custom": {"shell": "n=${item.n}; echo $((n + 1))"}}}}`
	_, err := cl.JobSubmit(ctx, []byte(unsafe))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeInvalid, ae.Code)
	byField := map[string]string{}
	for _, p := range ae.Problems {
		byField[p.Field] = p.Message
	}
	require.Contains(t, byField["agent_template[1].shell"], "${item.n}: cannot be quoted safely: bash evaluates it as arithmetic in [[ ... -gt ... ]]")
	require.Contains(t, byField["error_policy.on_item_failure.custom.shell"], "${item.n}: cannot be quoted safely: it is assigned to n, which is used in $((...))")
	require.Contains(t, byField["env.ITEM_ID"], "reserved")
	require.Len(t, byField, 3, "%v", ae.Problems)

	// The durable intake applies the same checks.
	names := messages.MustNames("")
	_, err = srv.JS().Publish(ctx, names.JobsSubmitSubject(), []byte(strings.Replace(unsafe, `"unsafe"`, `"unsafe-durable"`, 1)))
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.JobStatus(ctx, "unsafe-durable")
		if err != nil {
			return err
		}
		if st.State != messages.StateRejected {
			return fmt.Errorf("state %s", st.State)
		}
		fields := map[string]bool{}
		for _, p := range st.Problems {
			fields[p.Field] = true
		}
		require.Equal(t, map[string]bool{"agent_template[1].shell": true, "error_policy.on_item_failure.custom.shell": true, "env.ITEM_ID": true}, fields)
		return nil
	})

	// The safe form the refusal advises runs, and refuses the hostile value.
	id := submit(t, cl, `{"items": [{"id": "num", "n": "41"}, {"id": "evil", "n": "a[$(touch /tmp/pwned)]"}],
		"agent_template": [{"shell": "n=$(printf '%s\\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 3; [ \"$n\" -gt 5 ] && echo $((n + 1))",
			"retry_config": {"attempts": 1}}]}`)
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
}

// TestStepEnvironmentClean: a step that prints its environment, run by an
// agent whose own environment holds NATS credentials and settings, sees
// none of them: only the allow-listed variables, the job's env and the
// item's variables. ${env.NAME} reads the same environment.
func TestStepEnvironmentClean(t *testing.T) {
	secrets := map[string]string{
		"NATS_URL":              "nats://agent:hunter2@nats.internal:4222",
		"NATS_NKEY":             "/secrets/agent.nk",
		"NATS_CREDS":            "/secrets/agent.creds",
		"NATS_PASSWORD":         "hunter2",
		"FLEET_POOL":            "gpu",
		"FLEET_METRICS_ADDR":    ":9091",
		"AWS_SECRET_ACCESS_KEY": "s3cr3t",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("LC_TIME", "C")

	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", StepEnv: []string{"AWS_REGION"}}, nil)
	cl := client(t, srv)
	dir := t.TempDir()

	id := submit(t, cl, fmt.Sprintf(`{"id": "env", "items": [{"id": "it-1"}], "env": {"OUT": %q, "REGION": "eu"},
		"agent_template": [{"shell": "env > \"$OUT/env\"; printf '%%s' ${env.AWS_REGION} ${env.REGION} > \"$OUT/refs\""}]}`, dir))
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)

	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(readFile(t, dir+"/env")), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, v := range got {
		for sk, sv := range secrets {
			require.NotContains(t, v, sv, "%s shows the agent's %s", k, sk)
		}
		require.False(t, strings.HasPrefix(k, "NATS_") || strings.HasPrefix(k, "FLEET_"), "the step saw %s", k)
	}
	require.Equal(t, "eu-west-1", got["AWS_REGION"])
	require.Equal(t, "C", got["LC_TIME"])
	require.Equal(t, "eu", got["REGION"])
	require.Equal(t, "it-1", got["ITEM_ID"])
	require.Equal(t, "env", got["JOB_ID"])
	require.Equal(t, "1", got["ATTEMPT"])
	require.Equal(t, `{"id":"it-1"}`, got["ITEM_JSON"])
	require.Equal(t, "eu-west-1eu", readFile(t, dir+"/refs"))

	// ${env.NAME} cannot reach the agent's own variables either.
	id = submit(t, cl, `{"id": "env-ref", "items": [1], "agent_template": [{"shell": "echo ${env.NATS_PASSWORD}"}]}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.Contains(t, st.Errors[0].Message, "environment variable NATS_PASSWORD is not set")
}

// TestStepEnvRefusesAgentSecrets: an agent told to pass its NATS settings
// to steps refuses to start unless the operator insists.
func TestStepEnvRefusesAgentSecrets(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	nc := srv.Conn()
	err := agent.New(nc, agent.Config{StepEnv: []string{"NATS_*"}}).Run(context.Background())
	require.ErrorContains(t, err, "step_env: shell: step environment: NATS_*: the agent's NATS_* variables hold its NATS credentials")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestStepDefaultTimeout: a step with no timeout of its own is bounded by
// the agent's StepTimeout, so a hung step does not hold its item forever;
// a step's own timeout overrides it.
func TestStepDefaultTimeout(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", StepTimeout: 300 * time.Millisecond}, nil)
	cl := client(t, srv)

	id := submit(t, cl, `{"id": "hung", "items": [1], "agent_template": [{"shell": "sleep 30", "retry_config": {"attempts": 1}}]}`)
	st := waitJob(t, cl, id, 20*time.Second)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.Contains(t, st.Errors[0].Message, "timeout after 300ms")

	id = submit(t, cl, `{"id": "own-timeout", "items": [1], "agent_template": [{"shell": "sleep 1", "timeout": "20s", "retry_config": {"attempts": 1}}]}`)
	st = waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
}
