package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// natsContextSave is the file `nats context save prod --server URL
// --user alice --password s3cret` writes (every field present).
const natsContextSave = `{
  "description": "",
  "url": "URL",
  "socks_proxy": "",
  "token": "",
  "user": "alice",
  "password": "s3cret",
  "creds": "",
  "nkey": "",
  "cert": "",
  "key": "",
  "ca": "",
  "nsc": "",
  "jetstream_domain": "",
  "jetstream_api_prefix": "",
  "jetstream_event_prefix": "",
  "inbox_prefix": "",
  "user_jwt": "",
  "user_seed": "",
  "color_scheme": "",
  "tls_first": false,
  "windows_cert_store": "",
  "windows_cert_match_by": "",
  "windows_cert_match": "",
  "windows_ca_certs_match": null
}`

// fleetctl --context reads the nats CLI's context: `status` reaches a
// server that wants the context's user; the selected context serves when
// none is named; a flag overrides the context.
func TestStatusWithANatsContext(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t,
		fleettest.WithConfig(func(o *server.Options) { o.Username, o.Password = "alice", "s3cret" }),
		fleettest.WithConnectOptions(nats.UserInfo("alice", "s3cret")))
	ctx, cancel := context.WithCancel(context.Background())
	coord, err := coordinator.New(srv.Connect(t), coordinator.Config{})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { _ = coord.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-coord.Ready()
	cl, err := client.New(srv.Conn(), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, []byte(`{"id": "ctx-job", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error { _, err := cl.JobStatus(ctx, "ctx-job"); return err })

	root := t.TempDir()
	dir := filepath.Join(root, "nats", "context")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prod.json"), []byte(strings.Replace(natsContextSave, "URL", srv.URL(), 1)), 0o600))
	run := func(env map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}, args)
		return code, out.String(), errb.String()
	}
	env := map[string]string{"XDG_CONFIG_HOME": root}

	code, out, errOut := run(env, "status", "--context", "prod", "ctx-job", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "ctx-job", st.ID)

	// NATS_CONTEXT, and the selected context.
	code, _, errOut = run(map[string]string{"XDG_CONFIG_HOME": root, "NATS_CONTEXT": "prod"}, "status", "ctx-job")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, os.WriteFile(filepath.Join(root, "nats", "context.txt"), []byte("prod\n"), 0o600))
	code, _, errOut = run(env, "status", "ctx-job")
	require.Equal(t, exitOK, code, errOut)

	// A flag overrides the context's field: the wrong password is used.
	code, _, errOut = run(env, "status", "--context", "prod", "--password", "wrong", "ctx-job")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "Authorization")

	code, _, errOut = run(env, "status", "--context", "nope", "ctx-job")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, `--context "nope"`)
}
