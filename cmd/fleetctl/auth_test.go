package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/auth/authtest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// cliEnvMap runs fleetctl with the given environment.
func cliEnvMap(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}, args)
	return code, out.String(), errb.String()
}

func TestAuthInitWritesFilesOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	code, out, errOut := cliEnvMap(t, nil, "auth", "init", dir, "--pools", "default,gpu", "--tls", "--server-dir", "/etc/nats/auth")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "agent-gpu.nk")
	require.Contains(t, out, "--tls-ca "+filepath.Join(dir, "ca.pem"))
	for _, f := range []string{"coordinator.nk", "agent-default.nk", "agent-gpu.nk", "submitter.nk", "operator.nk", "auth.conf", "tls.conf", "ca.pem", "server-cert.pem", "server-key.pem"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	tlsConf, err := os.ReadFile(filepath.Join(dir, "tls.conf"))
	require.NoError(t, err)
	require.Contains(t, string(tlsConf), "/etc/nats/auth/server-key.pem")

	code, _, errOut = cliEnvMap(t, nil, "auth", "init", dir)
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "--force")

	code, _, errOut = cliEnvMap(t, nil, "auth", "init", dir, "--pools", "bad.pool", "--force")
	require.Equal(t, exitUsage, code, errOut)
}

func TestAuthPermissionsJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := cliEnvMap(t, nil, "auth", "permissions", "submitter", "--json")
	require.Equal(t, exitOK, code, errOut)
	var p struct {
		Role    string              `json:"role"`
		Publish map[string][]string `json:"publish"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	require.Equal(t, "submitter", p.Role)
	require.Contains(t, p.Publish["allow"], "fleet.api.jobs.submit")
	require.NotContains(t, p.Publish["allow"], "fleet.api.jobs.cancel")

	code, _, _ = cliEnvMap(t, nil, "auth", "permissions", "root")
	require.Equal(t, exitUsage, code)
}

// Against a secured fleet, each fleetctl user does its job, and a command
// its role may not run says "permission denied" at once instead of
// waiting out its 30s request timeout.
func TestCommandsOnASecuredFleet(t *testing.T) {
	t.Parallel()
	srv, res := authtest.RunServer(t, auth.Options{TLS: true, TLSHosts: []string{"127.0.0.1"}})
	ctx, cancel := context.WithCancel(context.Background())
	seed := func(user string) nats.Option {
		opts := authtest.User(t, res, user)
		return func(o *nats.Options) error {
			for _, opt := range opts {
				if err := opt(o); err != nil {
					return err
				}
			}
			return nil
		}
	}
	ca := filepath.Join(res.Dir, auth.CAFile)
	prov := provision.Config{AckWait: 2 * time.Second}
	coord, err := coordinator.New(srv.Connect(t, seed("coordinator")), coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan struct{}, 2)
	go func() { _ = coord.Run(ctx); done <- struct{}{} }()
	<-coord.Ready()
	_, err = provision.EnsurePool(ctx, srv.JS(), messages.MustNames(""), "default", prov)
	require.NoError(t, err)
	a := agent.New(srv.Connect(t, seed(auth.AgentUser("default"))), testhooks.WithAgent(agent.Config{}, testhooks.Agent{Provision: prov})).HandleBuiltins()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	as := func(user string) map[string]string {
		return map[string]string{"NATS_URL": srv.URL(), "NATS_NKEY": res.Seeds[user], "NATS_TLS_CA": ca}
	}
	path := writeSpec(t, "id: secured\nitems: [1, 2, 3]\nagent_template: [{handler: noop}]\n")
	code, out, errOut := cliEnvMap(t, as("submitter"), "submit", path, "--wait", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"state": "succeeded"`)

	code, out, errOut = cliEnvMap(t, as("operator"), "status", "secured", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"succeeded": 3`)
	// The operator pauses and resumes pools (the agent, watching the pause
	// bucket with its own grants, keeps running).
	for _, cmd := range []string{"pause", "resume"} {
		code, _, errOut = cliEnvMap(t, as("operator"), "pool", cmd, "default")
		require.Equal(t, exitOK, code, errOut)
	}

	for _, tc := range []struct {
		user    string
		args    []string
		subject string
	}{
		{auth.AgentUser("default"), []string{"submit", path}, "fleet.api.jobs.submit"},
		{"submitter", []string{"cancel", "secured"}, "fleet.api.jobs.cancel"},
		{"submitter", []string{"pause", "secured"}, "fleet.api.jobs.pause"},
		{"operator", []string{"submit", path}, "fleet.api.jobs.submit"},
	} {
		t.Run(tc.user+" "+tc.args[0], func(t *testing.T) {
			start := time.Now()
			code, _, errOut := cliEnvMap(t, as(tc.user), tc.args...)
			require.Equal(t, exitFailed, code, errOut)
			require.Contains(t, errOut, "permission denied")
			require.Contains(t, errOut, `"`+tc.subject+`"`)
			require.Less(t, time.Since(start), 5*time.Second, "a refusal must not wait out the request timeout")
		})
	}
}
