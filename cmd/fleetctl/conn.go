package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/client"
)

// connFlags are the connection flags of every command that talks to a fleet.
type connFlags struct {
	natsconn.Options
	prefix  string
	team    string
	timeout time.Duration
	env     *cliEnv
}

func addConnFlags(fs *flag.FlagSet, env *cliEnv) *connFlags {
	c := &connFlags{env: env}
	c.Register(fs, env.getenv)
	prefix := env.getenv("FLEET_PREFIX")
	if prefix == "" {
		prefix = "fleet"
	}
	fs.StringVar(&c.prefix, "prefix", prefix, "subject and resource prefix of the fleet (env FLEET_PREFIX)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "timeout of each API request")
	fs.StringVar(&c.team, "team", env.getenv("FLEET_TEAM"), "call the API as this team's submitter, in a fleet shared by teams (fleetctl auth init --teams; env FLEET_TEAM)")
	return c
}

// client connects to the configured server and returns an API client.
// A request the user's permissions refuse does not hang until the timeout:
// the server's verdict (which arrives asynchronously) is printed and the
// connection closed, so the pending call fails at once.
func (c *connFlags) client() (*nats.Conn, *client.Client, error) {
	c.Name = "fleetctl"
	if err := c.ApplyContext(c.env.getenv, true); err != nil {
		return nil, nil, err
	}
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	var (
		mu     sync.Mutex
		conn   *nats.Conn
		denied bool
	)
	c.OnAsyncError = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !natsconn.IsPermissionViolation(err) {
			// As nats.go's default handler would (env.stderr may be in use
			// by a progress bar on another goroutine).
			fmt.Fprintf(os.Stderr, "fleetctl: nats: %v\n", err)
			return
		}
		if denied {
			return
		}
		denied = true
		errorf(c.env, "permission denied: %s (these credentials' role may not do this; see docs/deploy.md)", permissionText(err))
		if conn != nil {
			conn.Close() // fails the pending request now
		}
	}
	nc, err := c.Connect("")
	if err != nil {
		return nil, nil, err
	}
	mu.Lock()
	conn = nc
	mu.Unlock()
	// fleetctl owns its connection: a server cut off the cluster is left
	// for another of the URL list.
	opts := []client.Option{client.WithTracerProvider(c.env.tracer), client.WithFailover()}
	if c.team != "" {
		opts = append(opts, client.WithTeam(c.team))
	}
	cl, err := client.New(nc, c.prefix, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cl, nil
}

// isTerminal reports whether w is a terminal: a file the terminal ioctl
// answers for (go-isatty), so /dev/null, a character device too, is not.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

func errorf(env *cliEnv, format string, args ...any) {
	fmt.Fprintf(env.stderr, "fleetctl: "+format+"\n", args...)
}

// permissionText is the server's words in a permissions violation, e.g.
// `Permissions Violation for Publish to "fleet.api.jobs.submit"`.
func permissionText(err error) string {
	s := err.Error()
	if i := strings.Index(s, "Permissions Violation"); i >= 0 {
		return s[i:]
	}
	return s
}
