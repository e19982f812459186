package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// localFleet is a coordinator and N agents in this process, on an embedded
// server unless a server URL is given (fleetctl run and demo).
type localFleet struct {
	srv    *embedded.Server
	nc     *nats.Conn
	client *client.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

type localOptions struct {
	conn        *connFlags
	agents      int
	concurrency int
	inputDir    string
	// secretDirs are where the local agents read env files and file
	// secrets: the job file's directory (relative paths), then anywhere
	// the user may read. The local agents read secrets from the whole of
	// fleetctl's environment: they are the user's own.
	secretDirs []string
	logger     zerolog.Logger
	// budget and bestEffort are the coordinator's AD-44 settings
	// (envflag.Policy).
	budget     budget.Settings
	bestEffort jobspec.BestEffortSettings
}

func startLocalFleet(ctx context.Context, o localOptions) (*localFleet, error) {
	f := &localFleet{}
	// Only a context named with --context or NATS_CONTEXT: without one,
	// these commands run a fleet of their own.
	if err := o.conn.ApplyContext(o.conn.env.getenv, false); err != nil {
		return nil, err
	}
	url := o.conn.URL
	if url == "" {
		srv, err := embedded.Start(embedded.Options{})
		if err != nil {
			return nil, err
		}
		f.srv, url = srv, srv.URL()
	}
	o.conn.Name = "fleetctl"
	nc, err := o.conn.Connect(url)
	if err != nil {
		f.stop()
		return nil, err
	}
	f.nc = nc
	if f.client, err = client.New(nc, o.conn.prefix, client.WithTracerProvider(o.conn.env.tracer)); err != nil {
		f.stop()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	coord, err := coordinator.New(nc, coordinator.Config{Prefix: o.conn.prefix, JSDomain: o.conn.JSDomain, InputDir: o.inputDir, Logger: o.logger,
		Budget: coordinator.BudgetSettings(o.budget), BestEffort: o.bestEffort, TracerProvider: o.conn.env.tracer})
	if err != nil {
		f.stop()
		return nil, err
	}
	f.goRun(func() error { return coord.Run(runCtx) })
	select {
	case <-coord.Ready():
	case <-time.After(30 * time.Second):
		f.stop()
		return nil, errors.New("coordinator not ready after 30s")
	case <-ctx.Done():
		f.stop()
		return nil, ctx.Err()
	}
	for i := 0; i < o.agents; i++ {
		a := agent.New(nc, agent.Config{
			Prefix: o.conn.prefix, JSDomain: o.conn.JSDomain, Name: fmt.Sprintf("local-agent-%d", i+1),
			Concurrency: o.concurrency, Logger: o.logger, ShutdownTimeout: 5 * time.Second,
			Reaper:         agent.ReaperSteps, // no step leaves processes behind
			TracerProvider: o.conn.env.tracer,
			SecretEnv:      []string{"*"}, SecretDirs: o.secretDirs,
		}).HandleBuiltins()
		f.goRun(func() error { return a.Run(runCtx) })
	}
	return f, nil
}

func (f *localFleet) goRun(fn func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(); err != nil {
			f.errMu.Lock()
			f.err = errors.Join(f.err, err)
			f.errMu.Unlock()
		}
	}()
}

// stop shuts agents and coordinator down, then the connection and server.
func (f *localFleet) stop() error {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	if f.nc != nil {
		_ = f.nc.Drain()
	}
	if f.srv != nil {
		f.srv.Shutdown()
	}
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.err
}
