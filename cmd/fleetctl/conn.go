package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
)

// connFlags are the connection flags of every command that talks to a fleet.
type connFlags struct {
	natsconn.Options
	prefix  string
	timeout time.Duration
}

func addConnFlags(fs *flag.FlagSet, env *cliEnv) *connFlags {
	c := &connFlags{}
	c.Register(fs, env.getenv)
	prefix := env.getenv("FLEET_PREFIX")
	if prefix == "" {
		prefix = "fleet"
	}
	fs.StringVar(&c.prefix, "prefix", prefix, "subject and resource prefix of the fleet (env FLEET_PREFIX)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "timeout of each API request")
	return c
}

// client connects to the configured server and returns an API client.
func (c *connFlags) client() (*nats.Conn, *coordinator.Client, error) {
	c.Name = "fleetctl"
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	nc, err := c.Connect("")
	if err != nil {
		return nil, nil, err
	}
	cl, err := coordinator.NewClient(nc, c.prefix)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cl, nil
}

// isTerminal reports whether w is a character device (a TTY).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func errorf(env *cliEnv, format string, args ...any) {
	fmt.Fprintf(env.stderr, "fleetctl: "+format+"\n", args...)
}
