package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// File names written by Init.
const (
	AccountsFile   = "auth.conf"
	TLSConfFile    = "tls.conf"
	CAFile         = "ca.pem"
	ServerCertFile = "server-cert.pem"
	ServerKeyFile  = "server-key.pem"
	RoutesFile     = "routes.conf"
	// LeafTLSConfFile turns TLS on for the leaf-node listener: included
	// inside the hub's leafnodes {} block.
	LeafTLSConfFile = "leaf-tls.conf"
)

// DefaultRoutes are the cluster routes routes.conf lists when none are
// given: the docker-compose nodes' addresses on their cluster network.
var DefaultRoutes = []string{"nats-1-cluster:6222", "nats-2-cluster:6222", "nats-3-cluster:6222"}

// RouteUser is the user NATS servers authenticate each other's routes as.
const RouteUser = "route"

// DefaultTLSHosts are the names a generated server certificate covers when
// none are given: the docker-compose nodes and the local machine.
var DefaultTLSHosts = []string{"nats-1", "nats-2", "nats-3", "nats", "localhost", "127.0.0.1"}

// Options configures Init.
type Options struct {
	// Dir receives the files. It is created if missing.
	Dir string
	// Prefix of the fleet's subjects and resources. Defaults to "fleet".
	Prefix string
	// Pools get one agent user each. Defaults to ["default"].
	Pools []string
	// Account is the NATS account of every user. Defaults to "FLEET".
	Account string
	// TLS also writes a CA, a server certificate for TLSHosts and a tls.conf
	// that turns TLS on; otherwise tls.conf is a comment.
	TLS      bool
	TLSHosts []string
	// TLSValidity defaults to DefaultTLSValidity.
	TLSValidity time.Duration
	// ServerDir is Dir as the nats-server sees it, for the file paths in
	// tls.conf (e.g. "/etc/nats/auth" in a container). Defaults to Dir's
	// absolute path.
	ServerDir string
	// Routes are the host:port of every node's cluster listener, written
	// to routes.conf with the route credentials. Defaults to DefaultRoutes.
	Routes []string
	// Force overwrites existing files; otherwise Init refuses to.
	Force bool
	// JSDomain is the hub's JetStream domain: every role is also granted
	// the JetStream API in its form ($JS.<domain>.API), which clients with
	// --js-domain use. Defaults to none.
	JSDomain string
	// Leaves are pools whose agents run behind a leaf node (docs/deploy.md
	// "Agents at other sites"); each is also in Pools. Each gets a link
	// user (LeafUser) at the hub and a leaf configuration (LeafConfFile).
	Leaves []string
	// LeafHubURLs are the hub's leaf-node listeners the leaf
	// configurations link to. Defaults to DefaultLeafHubURLs.
	LeafHubURLs []string
	// Teams, when given, replace the one shared submitter with a
	// submitter user per team (TeamUser, RoleTeam), each confined to its
	// team's jobs and pools (ParseTeams' form: team → pools; each pool is
	// also one of Pools). The coordinator needs the same list (--teams).
	Teams map[string][]string
}

// Result describes what Init wrote.
type Result struct {
	Dir   string
	Users []User
	// Seeds maps a user name to its seed file (for --nkey).
	Seeds map[string]string
	// Files lists every file written, in order.
	Files []string
	// TLS is true when certificates were written.
	TLS bool
	// WorkSigningSeed is the file of the coordinator's work-signing key
	// (the coordinator's --work-signing-key), WorkPublicKey its public
	// key (the agents' --work-verify-key; also in WorkPublicKeyFile).
	WorkSigningSeed string
	WorkPublicKey   string
	// Leaves are the leaf configurations written (Options.Leaves).
	Leaves []string
}

// The coordinator's work-signing key: its seed, and its public key.
const (
	WorkSigningFile   = "work-signing.nk"
	WorkPublicKeyFile = "work-signing.pub"
)

// SeedFile is the seed file name of user.
func SeedFile(user string) string { return user + ".nk" }

// AgentUser is the user name of pool's agents.
func AgentUser(pool string) string { return "agent-" + pool }

// Init generates an nkey per role (one agent user per pool), writes each
// seed to <user>.nk (mode 0600), the accounts include auth.conf, tls.conf,
// and with TLS a CA and a server certificate. It writes nothing if any
// target exists and Force is false.
func Init(o Options) (*Result, error) {
	if o.Dir == "" {
		return nil, errors.New("auth: init: no directory given")
	}
	names, err := messages.NewNames(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("auth: init: %w", err)
	}
	pools := o.Pools
	if len(pools) == 0 {
		pools = []string{messages.DefaultPool}
	}
	if err := natsconn.ValidDomain(o.JSDomain); err != nil {
		return nil, fmt.Errorf("auth: init: js_domain: %w", err)
	}
	pools = append(slices.Clone(pools), o.Leaves...)
	for _, tp := range o.Teams {
		pools = append(pools, tp...)
	}
	for _, p := range pools {
		if err := messages.ValidPool(p); err != nil {
			return nil, fmt.Errorf("auth: init: pool %q: %w", p, err)
		}
	}
	slices.Sort(pools)
	pools = slices.Compact(pools)

	type spec struct {
		name string
		role Role
		pool string
	}
	specs := []spec{{"coordinator", RoleCoordinator, ""}}
	for _, p := range pools {
		specs = append(specs, spec{AgentUser(p), RoleAgent, p})
	}
	if len(o.Teams) == 0 {
		specs = append(specs, spec{"submitter", RoleSubmitter, ""})
	}
	teams := make([]string, 0, len(o.Teams))
	for t := range o.Teams {
		teams = append(teams, t)
	}
	slices.Sort(teams)
	for _, t := range teams {
		specs = append(specs, spec{TeamUser(t), RoleTeam, t})
	}
	specs = append(specs, spec{"operator", RoleOperator, ""})

	files := map[string][]byte{}
	var order []string
	add := func(name string, data []byte) {
		files[name] = data
		order = append(order, name)
	}
	res := &Result{Dir: o.Dir, Seeds: map[string]string{}, TLS: o.TLS}
	for _, s := range specs {
		pub, seed, err := newUserKey()
		if err != nil {
			return nil, err
		}
		rolePools := []string{s.pool}
		if s.role == RoleCoordinator {
			rolePools = pools
		}
		var perms Permissions
		if s.role == RoleTeam {
			perms, err = TeamPermissions(names, s.pool)
		} else {
			perms, err = RolePermissions(s.role, names, rolePools...)
		}
		if err != nil {
			return nil, err
		}
		res.Users = append(res.Users, User{Name: s.name, Role: s.role, Pool: s.pool, NKey: pub, Permissions: perms.WithDomain(o.JSDomain).ForUser(pub)})
		add(SeedFile(s.name), append(seed, '\n'))
		res.Seeds[s.name] = filepath.Join(o.Dir, SeedFile(s.name))
	}
	leafFiles, err := initLeaves(o, names, res)
	if err != nil {
		return nil, err
	}
	// The key the coordinator signs work items with; agents verify them
	// with its public key.
	wkp, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("auth: init: nkey: %w", err)
	}
	wseed, err := wkp.Seed()
	if err != nil {
		return nil, fmt.Errorf("auth: init: nkey: %w", err)
	}
	if res.WorkPublicKey, err = wkp.PublicKey(); err != nil {
		return nil, fmt.Errorf("auth: init: nkey: %w", err)
	}
	add(WorkSigningFile, append(wseed, '\n'))
	add(WorkPublicKeyFile, []byte(res.WorkPublicKey+"\n"))
	res.WorkSigningSeed = filepath.Join(o.Dir, WorkSigningFile)
	var accounts bytes.Buffer
	if err := WriteAccounts(&accounts, o.Account, res.Users); err != nil {
		return nil, err
	}
	add(AccountsFile, accounts.Bytes())

	var tlsConf bytes.Buffer
	if o.TLS {
		hosts := o.TLSHosts
		if len(hosts) == 0 {
			hosts = DefaultTLSHosts
		}
		t, err := GenerateTLS(hosts, o.TLSValidity)
		if err != nil {
			return nil, err
		}
		add(CAFile, t.CA)
		add(ServerCertFile, t.ServerCert)
		add(ServerKeyFile, t.ServerKey)
		serverDir := o.ServerDir
		if serverDir == "" {
			if serverDir, err = filepath.Abs(o.Dir); err != nil {
				return nil, fmt.Errorf("auth: init: %w", err)
			}
		}
		err = WriteTLS(&tlsConf, filepath.ToSlash(filepath.Join(serverDir, ServerCertFile)), filepath.ToSlash(filepath.Join(serverDir, ServerKeyFile)))
		if err != nil {
			return nil, err
		}
	} else if err := WriteTLS(&tlsConf, "", ""); err != nil {
		return nil, err
	}
	add(TLSConfFile, tlsConf.Bytes())
	add(LeafTLSConfFile, leafTLSConf(tlsConf.Bytes()))

	routes := o.Routes
	if len(routes) == 0 {
		routes = DefaultRoutes
	}
	var routesConf bytes.Buffer
	if err := WriteRoutes(&routesConf, routes); err != nil {
		return nil, err
	}
	add(RoutesFile, routesConf.Bytes())
	for _, f := range leafFiles {
		add(f.name, f.data)
	}

	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("auth: init: %w", err)
	}
	if !o.Force {
		var exist []string
		for _, name := range order {
			if _, err := os.Stat(filepath.Join(o.Dir, name)); err == nil {
				exist = append(exist, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("auth: init: %w", err)
			}
		}
		if len(exist) > 0 {
			return nil, fmt.Errorf("%w: %s in %s (use --force to replace them)", ErrExists, exist, o.Dir)
		}
	}
	for _, name := range order {
		mode := fs.FileMode(0o644)
		if filepath.Ext(name) == ".nk" || name == ServerKeyFile || name == RoutesFile || strings.HasPrefix(name, "leaf-") {
			mode = 0o600
		}
		path := filepath.Join(o.Dir, name)
		if err := writeFile(path, files[name], mode); err != nil {
			return nil, fmt.Errorf("auth: init: %w", err)
		}
		res.Files = append(res.Files, path)
	}
	return res, nil
}

// writeFile writes data to path with mode, also when path exists with
// another mode.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// newUserKey makes a user nkey: its public key and its seed.
func newUserKey() (pub string, seed []byte, err error) {
	kp, err := nkeys.CreateUser()
	if err == nil {
		pub, err = kp.PublicKey()
	}
	if err == nil {
		seed, err = kp.Seed()
	}
	if err != nil {
		return "", nil, fmt.Errorf("auth: init: nkey: %w", err)
	}
	return pub, seed, nil
}
