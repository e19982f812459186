package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/ui"
)

// uiOptions are the flags of the dashboard the coordinator may serve.
type uiOptions struct {
	addr        string
	readOnly    bool
	allowRemote bool
	token       string
	creds, nkey string
}

func (o *uiOptions) register(fs *flag.FlagSet, getenv func(string) string, env *envflag.Env) {
	fs.StringVar(&o.addr, "ui-addr", getenv("FLEET_UI_ADDR"), "serve the web dashboard on this address, e.g. 127.0.0.1:8080 (env FLEET_UI_ADDR); loopback unless --ui-allow-remote")
	fs.BoolVar(&o.readOnly, "ui-read-only", env.Bool("FLEET_UI_READ_ONLY", false), "the dashboard hides and refuses cancel, replay and purge (env FLEET_UI_READ_ONLY)")
	fs.BoolVar(&o.allowRemote, "ui-allow-remote", env.Bool("FLEET_UI_ALLOW_REMOTE", false), "allow a --ui-addr other machines can reach, with the Host check off (put a TLS proxy in front: the token travels in clear) (env FLEET_UI_ALLOW_REMOTE)")
	fs.StringVar(&o.token, "ui-token", getenv("FLEET_UI_TOKEN"), "the dashboard's access token, at least 16 characters (env FLEET_UI_TOKEN; default: a random one, logged at start)")
	fs.StringVar(&o.creds, "ui-creds", getenv("FLEET_UI_CREDS"), "credentials file the dashboard connects with (an operator's), instead of the coordinator's connection (env FLEET_UI_CREDS)")
	fs.StringVar(&o.nkey, "ui-nkey", getenv("FLEET_UI_NKEY"), "nkey seed file the dashboard connects with (an operator's), instead of the coordinator's connection (env FLEET_UI_NKEY)")
}

// dashboard is the coordinator's dashboard, if --ui-addr asks for one.
type dashboard struct {
	srv    *ui.Server
	ln     net.Listener
	own    *nats.Conn // the dashboard's own connection
	cancel context.CancelFunc
	done   chan struct{}
	log    zerolog.Logger
}

// dashboard builds the dashboard, connects it and binds its address, so
// that a bad address fails the start. It connects on its own, as conn
// does, or with --ui-creds or --ui-nkey when given (it acts with its
// connection's permissions: an operator's, in a secured fleet).
func (o *uiOptions) dashboard(conn natsconn.Options, url string, prefix string, log zerolog.Logger, reg prometheus.Registerer) (*dashboard, error) {
	if o.addr == "" {
		return nil, nil
	}
	d := &dashboard{log: log}
	cfg := ui.Config{Addr: o.addr, AllowRemote: o.allowRemote, ReadOnly: o.readOnly, Prefix: prefix, JSDomain: conn.JSDomain, Logger: log, Registerer: reg, Token: o.token}
	if err := cfg.WithDefaults().Validate(); err != nil {
		if errors.Is(err, ui.ErrShortToken) {
			return nil, fmt.Errorf("--ui-token: %w", err)
		}
		return nil, fmt.Errorf("--ui-addr: %w (--ui-allow-remote)", err)
	}
	var srv atomic.Pointer[ui.Server]
	c := conn
	if o.creds != "" || o.nkey != "" {
		c.Creds, c.NKey, c.User, c.Password = o.creds, o.nkey, "", ""
	}
	c.Name = "jetfleet-ui"
	c.OnAsyncError = func(err error) {
		if s := srv.Load(); s != nil {
			s.NoteAsyncError(err)
		}
	}
	var err error
	if d.own, err = c.Connect(url); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s, err := ui.New(d.own, cfg)
	if err != nil {
		d.close()
		return nil, err
	}
	srv.Store(s)
	d.srv = s
	if d.ln, err = net.Listen("tcp", o.addr); err != nil {
		d.close()
		return nil, fmt.Errorf("--ui-addr: %w", err)
	}
	return d, nil
}

// serve serves the dashboard until ctx ends or close is called.
func (d *dashboard) serve(ctx context.Context) {
	if d == nil {
		return
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	d.log.Info().Str("url", d.srv.LoginURL("http://"+d.ln.Addr().String())).Msg("dashboard serving; open this address to log in")
	go func() {
		defer close(d.done)
		if err := d.srv.Serve(ctx, d.ln); err != nil {
			d.log.Error().Err(err).Msg("dashboard stopped")
		}
	}()
}

// close stops the dashboard (or releases its address if it never served)
// and closes its own connection.
func (d *dashboard) close() {
	if d == nil {
		return
	}
	if d.done != nil {
		d.cancel()
		<-d.done
	} else if d.ln != nil {
		_ = d.ln.Close()
	}
	if d.own != nil {
		d.own.Close()
	}
}
