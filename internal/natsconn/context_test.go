package natsconn_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

// writeContext writes testdata/nats/context/prod.json (as `nats context
// save prod --server nats://127.0.0.1:4333 --user alice --password s3cret
// --tlsca '~/ca.pem' --description 'jetfleet test'` writes it, every field
// present) under a new config root as name, with the fields in set
// changed, and selects it when selected is true. It returns the root.
func writeContext(t *testing.T, name string, set map[string]any, selected bool) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "nats", "context", "prod.json"))
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(data, &fields))
	for k, v := range set {
		fields[k] = v
	}
	data, err = json.MarshalIndent(fields, "", "  ")
	require.NoError(t, err)
	root := t.TempDir()
	dir := filepath.Join(root, "nats", "context")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), data, 0o600))
	if selected {
		require.NoError(t, os.WriteFile(filepath.Join(root, "nats", "context.txt"), []byte(name), 0o600))
	}
	return root
}

// parse registers the connection flags with env and parses args, then
// applies the context as the binaries do.
func parse(t *testing.T, env map[string]string, selected bool, args ...string) (natsconn.Options, error) {
	t.Helper()
	var o natsconn.Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	getenv := func(k string) string { return env[k] }
	o.Register(fs, getenv)
	require.NoError(t, fs.Parse(args))
	return o, o.ApplyContext(getenv, selected)
}

// The file as the nats CLI writes it: its URL, user and password are
// used, ~ in a path is the home directory, and the cosmetic fields do
// not matter.
func TestContextAsTheNatsCLIWritesIt(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS("testdata")))
	env := map[string]string{"XDG_CONFIG_HOME": root, "HOME": "/home/alice", "NATS_CONTEXT": "prod"}
	o, err := parse(t, env, false)
	require.NoError(t, err)
	require.Equal(t, "nats://127.0.0.1:4333", o.URL)
	require.Equal(t, "alice", o.User)
	require.Equal(t, "s3cret", o.Password)
	require.Equal(t, "/home/alice/ca.pem", o.TLSCA)

	// The selected one (context.txt), for the commands that use it, when
	// neither a context nor a server is given.
	delete(env, "NATS_CONTEXT")
	o, err = parse(t, env, true)
	require.NoError(t, err)
	require.Equal(t, "nats://127.0.0.1:4333", o.URL)
	o, err = parse(t, env, false)
	require.NoError(t, err)
	require.Empty(t, o.URL, "the selected context only where the command asks for it")
	o, err = parse(t, env, true, "--server", "nats://elsewhere:4222")
	require.NoError(t, err)
	require.Empty(t, o.User, "a server given: the selected context is not read")

	// Without XDG_CONFIG_HOME, ~/.config.
	home := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(home, ".config"), os.DirFS("testdata")))
	o, err = parse(t, map[string]string{"HOME": home}, false, "--context", "prod")
	require.NoError(t, err)
	require.Equal(t, "alice", o.User)
}

// Flags and NATS_* variables override the context; credentials are taken
// whole, from one side or the other.
func TestFlagsOverrideTheContext(t *testing.T) {
	root := writeContext(t, "ops", map[string]any{"ca": "", "token": "t0k"}, false)
	env := map[string]string{"XDG_CONFIG_HOME": root}

	o, err := parse(t, env, false, "--context", "ops", "--server", "nats://flag:4222", "--creds", "/etc/me.creds")
	require.NoError(t, err)
	require.Equal(t, "nats://flag:4222", o.URL)
	require.Equal(t, "/etc/me.creds", o.Creds)
	require.Empty(t, o.User, "the flags' credentials replace the context's")
	require.Empty(t, o.Password)
	require.Empty(t, o.Token)

	env["NATS_URL"] = "nats://env:4222"
	env["NATS_CONTEXT"] = "ops"
	o, err = parse(t, env, false, "--tls-ca", "/etc/ca.pem")
	require.NoError(t, err)
	require.Equal(t, "nats://env:4222", o.URL, "a NATS_* variable overrides the context too")
	require.Equal(t, "alice", o.User)
	require.Equal(t, "s3cret", o.Password)
	require.Equal(t, "t0k", o.Token)
	require.Equal(t, "/etc/ca.pem", o.TLSCA)

	// --context overrides NATS_CONTEXT.
	other := writeContext(t, "other", map[string]any{"url": "nats://other:4222", "ca": ""}, false)
	require.NoError(t, os.Rename(filepath.Join(other, "nats", "context", "other.json"), filepath.Join(root, "nats", "context", "other.json")))
	delete(env, "NATS_URL")
	o, err = parse(t, env, false, "--context", "other")
	require.NoError(t, err)
	require.Equal(t, "nats://other:4222", o.URL)
}

// Secrets by reference: env:// and file://.
func TestContextReferences(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(secret, []byte("from-file\n"), 0o600))
	root := writeContext(t, "refs", map[string]any{"ca": "", "user": "", "password": "",
		"token": "file://" + secret, "creds": "file://$CREDS_DIR/me.creds"}, false)
	env := map[string]string{"XDG_CONFIG_HOME": root, "CREDS_DIR": "/run/secrets"}
	o, err := parse(t, env, false, "--context", "refs")
	require.NoError(t, err)
	require.Equal(t, "from-file", o.Token)
	require.Equal(t, "/run/secrets/me.creds", o.Creds)

	root = writeContext(t, "envref", map[string]any{"ca": "", "password": "env://NATS_PW"}, false)
	o, err = parse(t, map[string]string{"XDG_CONFIG_HOME": root, "NATS_PW": "pw"}, false, "--context", "envref")
	require.NoError(t, err)
	require.Equal(t, "pw", o.Password)
}

// What jetfleet cannot honour is refused with the field's name.
func TestContextErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   map[string]any
		ctx   string
		wants string
	}{
		{"unknown context", nil, "nope", `no file`},
		{"name leaves the directory", nil, "../x", `may not hold`},
		{"jetstream domain not a token", map[string]any{"jetstream_domain": "hub.eu"}, "bad", "jetstream_domain"},
		{"jetstream api prefix", map[string]any{"jetstream_api_prefix": "$JS.x.API"}, "bad", "jetstream_api_prefix"},
		{"socks proxy", map[string]any{"socks_proxy": "127.0.0.1:1080"}, "bad", "socks_proxy"},
		{"nsc lookup", map[string]any{"nsc": "nsc://op/acc/user"}, "bad", "nsc"},
		{"1password creds", map[string]any{"creds": "op://vault/item"}, "bad", "creds"},
		{"not JSON", map[string]any{"tls_first": "yes"}, "bad", "bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := writeContext(t, "bad", tc.set, false)
			_, err := parse(t, map[string]string{"XDG_CONFIG_HOME": root}, false, "--context", tc.ctx)
			require.ErrorIs(t, err, natsconn.ErrContext)
			require.ErrorContains(t, err, tc.wants)
		})
	}
}

// A context reaches a real server that wants its user and password.
func TestConnectWithAContext(t *testing.T) {
	srv := natstest.RunServer(t,
		natstest.WithConfig(func(o *server.Options) { o.Username, o.Password = "alice", "s3cret" }),
		natstest.WithConnectOptions(nats.UserInfo("alice", "s3cret")))
	root := writeContext(t, "prod", map[string]any{"url": srv.URL(), "ca": ""}, true)
	o, err := parse(t, map[string]string{"XDG_CONFIG_HOME": root}, true)
	require.NoError(t, err)
	nc, err := o.Connect("")
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Flush())

	// A flag's wrong password wins over the context's right one.
	o, err = parse(t, map[string]string{"XDG_CONFIG_HOME": root}, true, "--context", "prod", "--user", "alice", "--password", "wrong")
	require.NoError(t, err)
	_, err = o.Connect("")
	require.ErrorIs(t, err, nats.ErrAuthorization)
}

// The context's jetstream_domain is the domain unless --js-domain or
// FLEET_JS_DOMAIN says otherwise.
func TestContextJetStreamDomain(t *testing.T) {
	root := writeContext(t, "site", map[string]any{"jetstream_domain": "hub"}, true)
	o, err := parse(t, map[string]string{"XDG_CONFIG_HOME": root}, true)
	require.NoError(t, err)
	require.Equal(t, "hub", o.JSDomain)

	o, err = parse(t, map[string]string{"XDG_CONFIG_HOME": root, "FLEET_JS_DOMAIN": "core"}, true)
	require.NoError(t, err)
	require.Equal(t, "core", o.JSDomain, "the environment wins over the context")

	o, err = parse(t, map[string]string{"XDG_CONFIG_HOME": root, "FLEET_JS_DOMAIN": "core"}, true, "--js-domain", "edge")
	require.NoError(t, err)
	require.Equal(t, "edge", o.JSDomain, "the flag wins over both")

	o, err = parse(t, map[string]string{"FLEET_JS_DOMAIN": "a.b"}, false, "--server", "nats://127.0.0.1:1")
	require.NoError(t, err)
	_, err = o.Connect("")
	require.ErrorIs(t, err, natsconn.ErrDomain)
	require.ErrorContains(t, err, "--js-domain")
}
