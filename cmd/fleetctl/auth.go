package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "auth", summary: "auth init DIR: nkeys, permissions and TLS for a secured cluster; auth permissions ROLE", run: runAuth})
}

func runAuth(_ context.Context, env *cliEnv, args []string) int {
	usage := func() {
		fmt.Fprintln(env.stderr, "usage: fleetctl auth init DIR [--pools default,gpu] [--tls] [--tls-hosts h1,h2] [--routes h1:6222,h2:6222] [--server-dir PATH] [--teams red=poola+poolb,blue=poolc] [--prefix fleet] [--force]")
		fmt.Fprintln(env.stderr, "       fleetctl auth permissions ROLE [--pool P] [--prefix fleet] [--json]")
		fmt.Fprintln(env.stderr, "\nROLE is coordinator, agent, submitter, team or operator; see docs/deploy.md and docs/security.md.")
	}
	if len(args) == 0 {
		usage()
		return exitUsage
	}
	switch args[0] {
	case "init":
		return runAuthInit(env, args[1:])
	case "permissions":
		return runAuthPermissions(env, args[1:])
	case "-h", "--help", "help":
		usage()
		return exitOK
	}
	errorf(env, "auth: unknown subcommand %q", args[0])
	usage()
	return exitUsage
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func runAuthInit(env *cliEnv, args []string) int {
	fs := newFlagSet(env, "auth init", "auth init DIR [flags]")
	pools := fs.String("pools", messages.DefaultPool, "comma-separated agent pools; each gets its own agent user")
	prefix := fs.String("prefix", envOr(env, "FLEET_PREFIX", messages.DefaultPrefix), "subject and resource prefix of the fleet (env FLEET_PREFIX)")
	account := fs.String("account", auth.DefaultAccount, "NATS account of the fleet's users")
	withTLS := fs.Bool("tls", false, "also write a CA and a server certificate, and turn TLS on in tls.conf")
	hosts := fs.String("tls-hosts", strings.Join(auth.DefaultTLSHosts, ","), "comma-separated DNS names and IPs the server certificate covers")
	routes := fs.String("routes", strings.Join(auth.DefaultRoutes, ","), "comma-separated host:port of every NATS node's cluster listener, for routes.conf")
	serverDir := fs.String("server-dir", "", "DIR as the nats-server sees it, for the paths in tls.conf (default: DIR's absolute path)")
	force := fs.Bool("force", false, "replace existing files (new keys: every user needs its new seed)")
	jsDomain := fs.String("js-domain", env.getenv(natsconn.DomainEnv), "the hub's JetStream domain: every role may also use the JetStream API in its form (clients with --js-domain; env "+natsconn.DomainEnv+")")
	leaves := fs.String("leaf", "", "comma-separated pools whose agents run behind a leaf node: each gets a link user and a leaf configuration leaf-POOL.conf (docs/deploy.md \"Agents at other sites\")")
	leafHub := fs.String("leaf-hub", strings.Join(auth.DefaultLeafHubURLs, ","), "comma-separated leaf-node URLs of the hub, for the leaf configurations")
	teamList := fs.String("teams", "", "a submitter user per team instead of one shared submitter, each confined to its team's jobs and pools: red=poola+poolb,blue=poolc (a team alone, \"red\", uses the pool of its name); give the coordinator the same --teams (docs/security.md \"Teams\")")
	if code, ok := parseArgs(fs, args, 1); !ok {
		return code
	}
	dir := fs.Arg(0)
	teams, err := auth.ParseTeams(*teamList)
	if err != nil {
		errorf(env, "--teams: %v", err)
		return exitUsage
	}
	res, err := auth.Init(auth.Options{
		Dir: dir, Prefix: *prefix, Pools: splitList(*pools), Account: *account, Teams: teams,
		TLS: *withTLS, TLSHosts: splitList(*hosts), ServerDir: *serverDir, Routes: splitList(*routes), Force: *force,
		JSDomain: *jsDomain, Leaves: splitList(*leaves), LeafHubURLs: splitList(*leafHub),
	})
	if err != nil {
		errorf(env, "%v", err)
		if errors.Is(err, auth.ErrExists) {
			return exitFailed
		}
		return exitUsage
	}
	w := env.stdout
	fmt.Fprintf(w, "wrote %d files to %s:\n", len(res.Files), dir)
	for _, u := range res.Users {
		if u.Role == auth.RoleLeaf {
			fmt.Fprintf(w, "  %-18s the leaf server of pool %s's site: its agent user, and the link to the hub as user %s (secret)\n", auth.LeafConfFile(u.Pool), u.Pool, u.Name)
			continue
		}
		what := "role " + string(u.Role)
		switch u.Role {
		case auth.RoleAgent:
			what += ", pool " + u.Pool
		case auth.RoleTeam:
			what += " " + u.Pool + ", pools " + strings.Join(teams[u.Pool], ",")
		}
		fmt.Fprintf(w, "  %-18s nkey seed of user %s (%s), inbox prefix %s\n", auth.SeedFile(u.Name), u.Name, what, natsconn.InboxPrefix(u.NKey))
	}
	fmt.Fprintf(w, "  %-18s the coordinator's work-signing key (--work-signing-key)\n", auth.WorkSigningFile)
	fmt.Fprintf(w, "  %-18s its public key, %s (agents' --work-verify-key)\n", auth.WorkPublicKeyFile, res.WorkPublicKey)
	fmt.Fprintf(w, "  %-18s nats-server include: account %s, JetStream on, %d users and their permissions\n", auth.AccountsFile, *account, len(res.Users))
	if res.TLS {
		fmt.Fprintf(w, "  %-18s CA certificate clients verify the server with (--tls-ca)\n", auth.CAFile)
		fmt.Fprintf(w, "  %-18s server certificate for %s, and its key\n", auth.ServerCertFile, *hosts)
		fmt.Fprintf(w, "  %-18s nats-server include that turns TLS on\n", auth.TLSConfFile)
	} else {
		fmt.Fprintf(w, "  %-18s nats-server include (TLS off; --tls turns it on)\n", auth.TLSConfFile)
	}
	fmt.Fprintf(w, "  %-18s include inside cluster {}: route password and the routes to %s\n", auth.RoutesFile, *routes)
	tlsFlag := ""
	if res.TLS {
		tlsFlag = " --tls-ca " + filepath.Join(dir, auth.CAFile)
	}
	nk := func(user string) string { return filepath.Join(dir, auth.SeedFile(user)) }
	fmt.Fprintln(w, "\nnext:")
	fmt.Fprintf(w, "  in nats-server.conf:  include %q and include %q; in its cluster {} block, include %q\n", auth.AccountsFile, auth.TLSConfFile, auth.RoutesFile)
	pl := append(splitList(*pools), splitList(*leaves)...)
	for _, tp := range teams {
		pl = append(pl, tp...)
	}
	slices.Sort(pl)
	pl = slices.Compact(pl)
	teamFlag := ""
	if len(teams) > 0 {
		teamFlag = " --teams " + auth.FormatTeams(teams)
	}
	fmt.Fprintf(w, "  coordinator --server URL --nkey %s%s --pools %s%s --work-signing-key %s\n", nk("coordinator"), tlsFlag, strings.Join(pl, ","),
		teamFlag, res.WorkSigningSeed)
	for _, p := range pl {
		if slices.Contains(splitList(*leaves), p) {
			continue // at its site, below
		}
		fmt.Fprintf(w, "  agent --server URL --nkey %s%s --pool %s --work-verify-key %s\n", nk(auth.AgentUser(p)), tlsFlag, p, res.WorkPublicKey)
	}
	for _, p := range splitList(*leaves) {
		fmt.Fprintf(w, "  at the site of %s: nats-server with include %q; agent --server LEAF-URL --js-domain %s --nkey %s --pool %s --work-verify-key %s\n",
			p, auth.LeafConfFile(p), *jsDomain, nk(auth.AgentUser(p)), p, res.WorkPublicKey)
	}
	if len(teams) == 0 {
		fmt.Fprintf(w, "  fleetctl submit job.yaml --server URL --nkey %s%s\n", nk("submitter"), tlsFlag)
	}
	for _, t := range slices.Sorted(maps.Keys(teams)) {
		fmt.Fprintf(w, "  fleetctl submit job.yaml --server URL --nkey %s%s --team %s\n", nk(auth.TeamUser(t)), tlsFlag, t)
	}
	fmt.Fprintf(w, "  fleetctl dlq list --server URL --nkey %s%s\n", nk("operator"), tlsFlag)
	fmt.Fprintf(w, "Keep the *.nk files secret (each is a user's or the coordinator's signing private key), and %s (the route password).\n", auth.RoutesFile)
	return exitOK
}

func runAuthPermissions(env *cliEnv, args []string) int {
	fs := newFlagSet(env, "auth permissions", "auth permissions ROLE [--pool P] [--prefix fleet] [--json]")
	pool := fs.String("pool", messages.DefaultPool, "the agent's pool; for the coordinator, every pool (comma-separated); for a team, the team")
	prefix := fs.String("prefix", envOr(env, "FLEET_PREFIX", messages.DefaultPrefix), "subject and resource prefix of the fleet (env FLEET_PREFIX)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := parseArgs(fs, args, 1); !ok {
		return code
	}
	role, err := auth.ParseRole(fs.Arg(0))
	if err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	names, err := messages.NewNames(*prefix)
	if err != nil {
		errorf(env, "--prefix: %v", err)
		return exitUsage
	}
	p, err := auth.RolePermissions(role, names, splitList(*pool)...)
	if err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	if *asJSON {
		writeJSON(env.stdout, map[string]any{
			"role":            role,
			"publish":         map[string][]string{"allow": p.Publish.Allow, "deny": p.Publish.Deny},
			"subscribe":       map[string][]string{"allow": p.Subscribe.Allow, "deny": p.Subscribe.Deny},
			"allow_responses": p.AllowResponses,
		})
		return exitOK
	}
	w := env.stdout
	fmt.Fprintf(w, "role %s may publish to:\n", role)
	for _, s := range p.Publish.Allow {
		fmt.Fprintf(w, "  %s\n", s)
	}
	if p.AllowResponses {
		fmt.Fprintln(w, "  (and reply once to each request it receives)")
	}
	fmt.Fprintln(w, "and subscribe to:")
	for _, s := range p.Subscribe.Allow {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintln(w, "Everything else is refused.")
	return exitOK
}

func envOr(env *cliEnv, key, def string) string {
	if v := env.getenv(key); v != "" {
		return v
	}
	return def
}
