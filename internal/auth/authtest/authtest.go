// Package authtest starts embedded servers secured with the files
// `fleetctl auth init` writes, for tests.
package authtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

// LoadConfig parses a nats-server configuration that includes the files
// auth.Init wrote to dir (auth.conf and tls.conf), as `nats-server -c`
// would.
func LoadConfig(t testing.TB, dir string) *server.Options {
	t.Helper()
	confDir := t.TempDir()
	conf := filepath.Join(confDir, "server.conf")
	// Includes are relative to the including file.
	rel, err := filepath.Rel(confDir, dir)
	if err != nil {
		t.Fatal(err)
	}
	body := "include \"" + filepath.Join(rel, auth.AccountsFile) + "\"\ninclude \"" + filepath.Join(rel, auth.TLSConfFile) + "\"\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("authtest: %v", err)
	}
	return opts
}

// RunServer writes o's files to a temporary directory (o.Dir is ignored)
// and starts an embedded server with them. fleettest's own connection is
// the coordinator's (it has $JS.API.INFO), plus the CA when TLS is on.
func RunServer(t testing.TB, o auth.Options, opts ...natstest.Option) (*natstest.Server, *auth.Result) {
	t.Helper()
	o.Dir = t.TempDir()
	res, err := auth.Init(o)
	if err != nil {
		t.Fatal(err)
	}
	parsed := LoadConfig(t, o.Dir)
	conn := User(t, res, "coordinator")
	if res.TLS {
		conn = append(conn, nats.RootCAs(filepath.Join(o.Dir, auth.CAFile)))
	}
	srv := natstest.RunServer(t, append([]natstest.Option{
		natstest.WithConfig(func(so *server.Options) {
			so.Accounts, so.Nkeys, so.Users = parsed.Accounts, parsed.Nkeys, parsed.Users
			if parsed.TLSConfig != nil {
				so.TLS, so.TLSConfig, so.TLSTimeout = parsed.TLS, parsed.TLSConfig, parsed.TLSTimeout
			}
		}),
		natstest.WithAccount(auth.DefaultAccount),
		natstest.WithConnectOptions(conn...),
	}, opts...)...)
	return srv, res
}

// User returns the connection options of user of res: its nkey, and its
// own inbox prefix, the only one its permissions let it read.
func User(t testing.TB, res *auth.Result, user string) []nats.Option {
	t.Helper()
	seed, err := nats.NkeyOptionFromSeed(res.Seeds[user])
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := natsconn.InboxPrefixOfSeedFile(res.Seeds[user])
	if err != nil {
		t.Fatal(err)
	}
	return []nats.Option{seed, nats.CustomInboxPrefix(inbox)}
}

// LoadLeaf parses the leaf configuration auth.Init wrote for pool's site
// (auth.LeafConfFile), as the leaf's `nats-server -c` would.
func LoadLeaf(t testing.TB, res *auth.Result, pool string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join(res.Dir, auth.LeafConfFile(pool)))
	if err != nil {
		t.Fatalf("authtest: %v", err)
	}
	return opts
}

// LeafConfig returns a fleettest option that gives a leaf server (RunLeaf)
// the accounts, users and link credentials of parsed (LoadLeaf), keeping
// the link's URL (RunLeaf's proxy).
func LeafConfig(parsed *server.Options) natstest.Option {
	return natstest.WithConfig(func(so *server.Options) {
		so.Accounts, so.Nkeys, so.Users = parsed.Accounts, parsed.Nkeys, parsed.Users
		for i, r := range so.LeafNode.Remotes {
			if i < len(parsed.LeafNode.Remotes) {
				p := parsed.LeafNode.Remotes[i]
				r.Nkey, r.Credentials, r.LocalAccount = p.Nkey, p.Credentials, p.LocalAccount
			}
		}
	})
}
