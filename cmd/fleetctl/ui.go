package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/obs"
	"github.com/jetfleet/jetfleet/internal/ui"
)

func init() {
	register(command{name: "ui", summary: "serve the web dashboard (jobs, dead letters, agents) on --listen", run: runUI})
}

func runUI(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "ui", "ui [--listen ADDR] [--token TOKEN] [--allow-remote] [--read-only] [connection flags]")
	conn := addConnFlags(fs, env)
	listen := fs.String("listen", envOr(env, "FLEET_UI_ADDR", ui.DefaultAddr), "address to serve the dashboard on (env FLEET_UI_ADDR); loopback unless --allow-remote")
	allowRemote := fs.Bool("allow-remote", false, "allow a --listen address other machines can reach, with the Host check off (put a TLS proxy in front: the token travels in clear)")
	token := fs.String("token", envOr(env, "FLEET_UI_TOKEN", ""), "access token every request needs, at least 16 characters (env FLEET_UI_TOKEN; default: a random one, printed at start)")
	readOnly := fs.Bool("read-only", false, "hide and refuse cancel, replay and purge")
	logLevel := fs.String("log-level", envOr(env, "FLEET_LOG_LEVEL", "info"), "log level")
	if code, ok := parseArgs(fs, args, 0); !ok {
		return code
	}
	log, err := obs.Logger(env.stderr, *logLevel, isTerminal(env.stderr))
	if err != nil {
		errorf(env, "--log-level: %v", err)
		return exitUsage
	}
	cfg := ui.Config{Addr: *listen, AllowRemote: *allowRemote, ReadOnly: *readOnly, Prefix: conn.prefix,
		RequestTimeout: conn.timeout, Logger: log, Token: *token}
	if err := cfg.WithDefaults().Validate(); err != nil {
		switch {
		case errors.Is(err, ui.ErrRemoteListen):
			errorf(env, "%v (--allow-remote)", err)
		case errors.Is(err, ui.ErrShortToken):
			errorf(env, "--token: %v", err)
		default:
			errorf(env, "%v", err)
		}
		return exitUsage
	}
	// The dashboard learns of refused operations from the connection's
	// asynchronous errors.
	var (
		mu   sync.Mutex
		dash *ui.Server
	)
	conn.Name = "jetfleet-ui"
	conn.OnAsyncError = func(err error) {
		mu.Lock()
		d := dash
		mu.Unlock()
		if d != nil {
			d.NoteAsyncError(err)
		}
	}
	if err := conn.ApplyContext(env.getenv, true); err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	if conn.URL == "" {
		conn.URL = nats.DefaultURL
	}
	cfg.JSDomain = conn.JSDomain
	nc, err := conn.Connect("")
	if err != nil {
		errorf(env, "%v", err)
		return exitFailed
	}
	defer nc.Close()
	d, err := ui.New(nc, cfg)
	if err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	mu.Lock()
	dash = d
	mu.Unlock()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *listen)
	if err != nil {
		errorf(env, "--listen: %v", err)
		return exitFailed
	}
	mode := ""
	if *readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(env.stdout, "dashboard%s: %s\n", mode, d.LoginURL("http://"+ln.Addr().String()))
	if *allowRemote {
		fmt.Fprintln(env.stderr, "WARNING: --allow-remote: other machines can reach the dashboard and the Host check is off; anyone with the token can cancel jobs and purge dead letters. Put a TLS proxy in front: the token travels in clear.")
	}
	if err := d.Serve(ctx, ln); err != nil {
		errorf(env, "%v", err)
		return exitFailed
	}
	return exitOK
}
