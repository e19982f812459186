package main

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func noEnv(string) string { return "" }

// startRun runs the coordinator's main with args until the test ends; done
// delivers what run returned, should it return early.
func startRun(t *testing.T, getenv func(string) string, args ...string) (context.Context, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, getenv) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("coordinator did not stop")
		}
	})
	return ctx, done
}

// The coordinator's embedded server does not listen beyond this machine
// without credentials, and says how to give it some.
func TestEmbeddedServerRefusesAnOpenListen(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "0.0.0.0:4222", "--data-dir", t.TempDir()}, noEnv)
	require.ErrorIs(t, err, embedded.ErrInsecureListen)
	require.Contains(t, err.Error(), "--auth-dir")

	err = run(context.Background(), []string{"--server", "nats://127.0.0.1:4222", "--auth-dir", t.TempDir()}, noEnv)
	require.ErrorContains(t, err, "--auth-dir secures the embedded server")
}

// coordinator --listen 0.0.0.0:PORT --auth-dir DIR: the coordinator serves
// its API through its own secured server, where an anonymous client is
// refused and the submitter's key works.
func TestEmbeddedServerWithAuthDir(t *testing.T) {
	dir := t.TempDir()
	res, err := auth.Init(auth.Options{Dir: dir, TLS: true})
	require.NoError(t, err)
	port := fleettest.FreePort(t)
	ctx, done := startRun(t, noEnv, "--listen", "0.0.0.0:"+strconv.Itoa(port), "--auth-dir", dir, "--data-dir", t.TempDir(),
		"--pools", "default", "--log-level", "warn")
	url := "tls://127.0.0.1:" + strconv.Itoa(port)
	ca := nats.RootCAs(filepath.Join(dir, auth.CAFile))
	seed, err := nats.NkeyOptionFromSeed(res.Seeds["submitter"])
	require.NoError(t, err)
	inbox, err := natsconn.InboxPrefixOfSeedFile(res.Seeds["submitter"])
	require.NoError(t, err)
	var nc *nats.Conn
	fleettest.WaitFor(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("coordinator exited: %v", err)
		default:
		}
		c, err := nats.Connect(url, ca, seed, nats.CustomInboxPrefix(inbox))
		if err != nil {
			return err
		}
		nc = c
		return nil
	})
	defer nc.Close()
	cl, err := client.New(nc, "")
	require.NoError(t, err)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		_, err := cl.JobList(cctx, messages.ListRequest{})
		return err
	})
	_, err = nats.Connect(url, ca)
	require.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous client is refused")
}

// AD-44's settings are a flag or a variable away: --retry-budget-profile
// ad44 gives a job without a budget 20 retries and 3 per item, AD-44's
// per-workflow name caps the item, and the best-effort flags set the
// deadline a best_effort block without one gets.
func TestAD44SettingsFromFlagsAndEnv(t *testing.T) {
	port := fleettest.FreePort(t)
	env := map[string]string{"RETRY_BUDGET_PER_WORKFLOW_MAX": "2", "BEST_EFFORT_DEADLINE_DEFAULT": "10m"}
	ctx, done := startRun(t, func(k string) string { return env[k] }, "--listen", "127.0.0.1:"+strconv.Itoa(port),
		"--data-dir", t.TempDir(), "--log-level", "warn", "--retry-budget-profile", "ad44", "--best-effort-deadline-max", "1h")
	var nc *nats.Conn
	fleettest.WaitFor(t, 30*time.Second, func() (err error) {
		select {
		case err := <-done:
			t.Fatalf("coordinator exited: %v", err)
		default:
		}
		nc, err = nats.Connect("nats://127.0.0.1:" + strconv.Itoa(port))
		return err
	})
	defer nc.Close()
	cl, err := client.New(nc, "")
	require.NoError(t, err)
	var reply *messages.SubmitReply
	fleettest.WaitFor(t, 30*time.Second, func() (err error) {
		reply, err = cl.JobSubmit(ctx, []byte(`{"id": "ad44", "items": [1, 2, 3], "agent_template": [{"shell": "true"}], "best_effort": {}}`))
		return err
	})
	var st *messages.JobStatus
	fleettest.WaitFor(t, 30*time.Second, func() (err error) {
		st, err = cl.JobStatus(ctx, reply.JobID)
		return err
	})
	require.NotNil(t, st.Budget)
	require.Equal(t, 20, st.Budget.Total, "the ad44 profile's RETRY_BUDGET_DEFAULT")
	require.Equal(t, 2, st.Budget.PerItemMax, "RETRY_BUDGET_PER_WORKFLOW_MAX over the profile's 3 (its default) and 5 (its max)")
	require.NotNil(t, st.BestEffort)
	require.Equal(t, messages.Duration(10*time.Minute), st.BestEffort.DeadlineAfter)
}

// A context that cannot be read stops the coordinator at start, naming it
// (NATS_CONTEXT as well as --context).
func TestUnreadableContextIsRefused(t *testing.T) {
	env := func(k string) string {
		switch k {
		case "NATS_CONTEXT":
			return "nope"
		case "XDG_CONFIG_HOME":
			return t.TempDir()
		}
		return ""
	}
	err := run(context.Background(), nil, env)
	require.ErrorIs(t, err, natsconn.ErrContext)
	require.ErrorContains(t, err, `"nope"`)
}

// A malformed variable stops the coordinator at start, before it starts
// a server or connects, with a usage error (exit code 2) naming it, its
// value and what it should be, rather than running with the default; a
// flag given for the same setting does not hide it.
func TestMalformedEnvironmentIsRefused(t *testing.T) {
	tests := []struct {
		key, value string
		args       []string
		want       string
	}{
		{"FLEET_ACK_WAIT", "5x", nil, `FLEET_ACK_WAIT: "5x" is not a duration`},
		{"FLEET_MAX_ITEMS", "lots", nil, `FLEET_MAX_ITEMS: "lots" is not an integer`},
		{"FLEET_JOB_QUEUE", "1e3", []string{"--job-queue", "10"}, `FLEET_JOB_QUEUE: "1e3" is not an integer`},
		{"FLEET_UI_READ_ONLY", "on", nil, `FLEET_UI_READ_ONLY: "on" is not a bool`},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			env := func(k string) string {
				if k == tt.key {
					return tt.value
				}
				return ""
			}
			args := append([]string{"--data-dir", t.TempDir()}, tt.args...)
			err := run(context.Background(), args, env)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, 2, envflag.ExitCode(err))
		})
	}
}
