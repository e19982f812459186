package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/pkg/client"
)

// fleetCmd is the opening every subcommand that talks to a fleet shares:
// a flag set with the connection flags (and --json when the subcommand
// prints JSON), the argument check, the connection, and a context bounded
// by --timeout for its requests. A subcommand adds its own flags to fs
// between newFleetCmd and parse, and states only what is its own: its
// body with the API client (run), or one request whose answer it prints
// (call).
type fleetCmd struct {
	env  *cliEnv
	fs   *flag.FlagSet
	conn *connFlags
	json *bool // nil without --json

	// untimed leaves the requests' context without a timeout (watch
	// follows a job for as long as it runs); minTimeout is the least
	// time they are given (prune deletes each job's data in turn).
	untimed    bool
	minTimeout time.Duration

	nc     *nats.Conn // set by connect
	client *client.Client
}

// jsonFlag says whether a subcommand takes --json.
type jsonFlag bool

const (
	withJSON jsonFlag = true
	noJSON   jsonFlag = false
)

// anyArgs is parse's n for a subcommand that checks its positional
// arguments itself.
const anyArgs = -1

// newFleetCmd returns the opening of subcommand name, whose usage line
// (after "fleetctl ") is usageLine.
func newFleetCmd(env *cliEnv, name, usageLine string, j jsonFlag) *fleetCmd {
	c := &fleetCmd{env: env, fs: newFlagSet(env, name, usageLine)}
	c.conn = addConnFlags(c.fs, env)
	if j {
		c.json = c.fs.Bool("json", false, "print JSON")
	}
	return c
}

// parse parses args (flags and positional arguments in any order) and
// wants exactly n positional arguments, any number for anyArgs; another
// count prints the usage. ok=false means return code.
func (c *fleetCmd) parse(args []string, n int) (code int, ok bool) {
	if n == anyArgs {
		return parseFlags(c.fs, args)
	}
	return parseArgs(c.fs, args, n)
}

// asJSON reports whether --json was given.
func (c *fleetCmd) asJSON() bool { return c.json != nil && *c.json }

// printedJSON prints v and reports true when --json was given.
func (c *fleetCmd) printedJSON(v any) bool {
	if c.asJSON() {
		writeJSON(c.env.stdout, v)
	}
	return c.asJSON()
}

// connect connects once; a failure is reported. close releases the
// connection.
func (c *fleetCmd) connect() bool {
	if c.client != nil {
		return true
	}
	nc, client, err := c.conn.client()
	if err != nil {
		errorf(c.env, "%v", err)
		return false
	}
	c.nc, c.client = nc, client
	return true
}

func (c *fleetCmd) close() {
	if c.nc != nil {
		c.nc.Close()
	}
}

// bound returns ctx bounded by the request timeout.
func (c *fleetCmd) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.untimed {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, max(c.conn.timeout, c.minTimeout))
}

// run connects, calls fn with the API client and a context bounded by
// the request timeout, and closes the connection. It returns fn's exit
// code, or 1 when it could not connect.
func (c *fleetCmd) run(ctx context.Context, fn func(ctx context.Context, client *client.Client) int) int {
	if !c.connect() {
		return exitFailed
	}
	defer c.close()
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return fn(ctx, c.client)
}

// apiFailed reports err and returns its exit code (exitForAPIError).
func (c *fleetCmd) apiFailed(err error) int {
	errorf(c.env, "%v", err)
	return exitForAPIError(err)
}

// call connects unless connected and makes one API request, bounded by
// the request timeout. A failure is reported and mapped to the exit
// status; code is exitOK otherwise. The caller defers c.close.
func call[T any](ctx context.Context, c *fleetCmd, req func(context.Context, *client.Client) (T, error)) (v T, code int) {
	if !c.connect() {
		return v, exitFailed
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	v, err := req(ctx, c.client)
	if err != nil {
		return v, c.apiFailed(err)
	}
	return v, exitOK
}

// family is a command with subcommands ("fleetctl limit set ..."): run
// prints its help or hands the arguments to the subcommand they name.
type family struct {
	name  string
	usage string // after "usage: fleetctl "
	cmds  []command
	width int      // of the subcommand names in the help
	notes []string // lines after the subcommands
	// names lists the subcommands in the unknown-command error.
	names string
}

func (f *family) run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := env.stderr
		if len(args) > 0 {
			w = env.stdout
		}
		fmt.Fprintln(w, "usage: fleetctl "+f.usage)
		fmt.Fprintln(w)
		for _, c := range f.cmds {
			fmt.Fprintf(w, "  %-*s %s\n", f.width, c.name, c.summary)
		}
		if len(f.notes) > 0 {
			fmt.Fprintln(w)
			for _, l := range f.notes {
				fmt.Fprintln(w, l)
			}
		}
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range f.cmds {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
	}
	errorf(env, "%s: unknown command %q (%s)", f.name, args[0], f.names)
	return exitUsage
}
