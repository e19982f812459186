package fleettest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Defaults of RunFleet.
const (
	// DefaultFleetAgents is how many agents RunFleet starts.
	DefaultFleetAgents = 1
	// DefaultFleetConcurrency is each agent's concurrency.
	DefaultFleetConcurrency = 4
	// DefaultFleetShutdown is the agents' ShutdownTimeout: how long a
	// test's end waits for items still running.
	DefaultFleetShutdown = 5 * time.Second
	// fleetReady bounds the wait for the coordinator and the agents.
	fleetReady = 30 * time.Second
)

// Fleet is a running test fleet: an embedded server, a coordinator and
// agents, each on its own connection, and a client. RunFleet returns it;
// everything stops when the test ends. Its fields are not to be changed;
// Client is safe for concurrent use.
type Fleet struct {
	// Server is the embedded server (or the one given with WithServer).
	Server *Server
	// Client calls the coordinator's API, on Server.Conn().
	Client *client.Client
	// Coordinator is the fleet's coordinator.
	Coordinator *coordinator.Coordinator
	// Agents are the fleet's agents, all of Pool.
	Agents []*agent.Agent
	// Pool and Prefix are the agents' pool and the fleet's prefix.
	Pool, Prefix string

	// silent marks the agents that publish no presence.
	silent map[string]bool
}

// FleetOption configures RunFleet. An invalid one fails the test with the
// option's name.
type FleetOption func(*fleetConfig) error

type fleetConfig struct {
	agents, concurrency int
	pool                string
	server              *Server
	serverOpts          []Option
	coord               []func(*coordinator.Config)
	agentCfg            []func(int, *agent.Config)
	setup               []func(*agent.Agent)
	logger              zerolog.Logger
}

// WithAgents sets how many agents run (≥ 1). Defaults to DefaultFleetAgents.
func WithAgents(n int) FleetOption {
	return func(c *fleetConfig) error {
		if n < 1 {
			return fmt.Errorf("WithAgents(%d): want at least 1", n)
		}
		c.agents = n
		return nil
	}
}

// WithConcurrency sets each agent's concurrency (≥ 1). Defaults to
// DefaultFleetConcurrency.
func WithConcurrency(n int) FleetOption {
	return func(c *fleetConfig) error {
		if n < 1 || n > agent.MaxConcurrency {
			return fmt.Errorf("WithConcurrency(%d): want 1 to %d", n, agent.MaxConcurrency)
		}
		c.concurrency = n
		return nil
	}
}

// WithPool sets the agents' pool. Defaults to "default".
func WithPool(pool string) FleetOption {
	return func(c *fleetConfig) error {
		if err := messages.ValidPool(pool); err != nil {
			return fmt.Errorf("WithPool(%q): %w", pool, err)
		}
		c.pool = pool
		return nil
	}
}

// WithCoordinatorConfig changes the coordinator's configuration before it
// starts; RunFleet has set its Logger. Its Prefix is the fleet's.
func WithCoordinatorConfig(fn func(*coordinator.Config)) FleetOption {
	return func(c *fleetConfig) error {
		if fn != nil {
			c.coord = append(c.coord, fn)
		}
		return nil
	}
}

// WithAgentConfig changes agent i's configuration (0-based) before it
// starts; RunFleet has set its Name, Pool, Concurrency, Logger and
// ShutdownTimeout, and its Prefix is the coordinator's whatever fn says.
func WithAgentConfig(fn func(i int, cfg *agent.Config)) FleetOption {
	return func(c *fleetConfig) error {
		if fn != nil {
			c.agentCfg = append(c.agentCfg, fn)
		}
		return nil
	}
}

// WithAgentSetup calls fn with every agent before it runs, after the
// handlers are registered: to add middleware (Agent.Use) or typed handlers
// (agent.HandleFunc).
func WithAgentSetup(fn func(*agent.Agent)) FleetOption {
	return func(c *fleetConfig) error {
		if fn != nil {
			c.setup = append(c.setup, fn)
		}
		return nil
	}
}

// WithServer runs the fleet on srv instead of a new server.
func WithServer(srv *Server) FleetOption {
	return func(c *fleetConfig) error {
		if srv == nil {
			return errors.New("WithServer(nil): want a server")
		}
		c.server = srv
		return nil
	}
}

// WithServerOptions are the options of the server RunFleet starts.
func WithServerOptions(opts ...Option) FleetOption {
	return func(c *fleetConfig) error {
		c.serverOpts = append(c.serverOpts, opts...)
		return nil
	}
}

// WithLogger is the coordinator's and the agents' logger. Defaults to
// zerolog.Nop().
func WithLogger(log zerolog.Logger) FleetOption {
	return func(c *fleetConfig) error {
		c.logger = log
		return nil
	}
}

// RunFleet starts a fleet for a test, rivertest-style: an embedded
// JetStream server, a coordinator, and agents (one by default) that
// register handlers (use agent.Typed for a typed one; agent.Builtins() are
// not added unless handlers holds them). It returns once the coordinator
// serves its API and every agent has announced itself, so that a job
// submitted then is checked against the agents' handlers. The agents stop
// (in-flight items get DefaultFleetShutdown), then the coordinator and the
// server, when the test ends; an error either returns fails the test.
func RunFleet(t testing.TB, handlers map[string]agent.HandlerFunc, opts ...FleetOption) *Fleet {
	t.Helper()
	cfg := fleetConfig{agents: DefaultFleetAgents, concurrency: DefaultFleetConcurrency, pool: messages.DefaultPool, logger: zerolog.Nop()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			t.Fatalf("fleettest: RunFleet: %v", err)
		}
	}
	srv := cfg.server
	if srv == nil {
		srv = RunServer(t, cfg.serverOpts...)
	}

	ccfg := coordinator.Config{Logger: cfg.logger}
	for _, fn := range cfg.coord {
		fn(&ccfg)
	}
	names, err := messages.NewNames(ccfg.Prefix)
	if err != nil {
		t.Fatalf("fleettest: RunFleet: coordinator prefix: %v", err)
	}
	// Connections first: cleanups run last-registered first, so the
	// processes stop before the server closes their connections.
	coordConn := srv.Connect(t)
	agentConns := make([]*nats.Conn, cfg.agents)
	for i := range agentConns {
		agentConns[i] = srv.Connect(t)
	}
	coord, err := coordinator.New(coordConn, ccfg)
	if err != nil {
		t.Fatalf("fleettest: RunFleet: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error
	)
	run := func(what string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				errMu.Lock()
				runErr = errors.Join(runErr, fmt.Errorf("%s: %w", what, err))
				errMu.Unlock()
			}
		}()
	}
	// The coordinator stops after the agents: its cleanup is registered
	// first, so it runs last.
	coordCtx, coordCancel := context.WithCancel(context.Background())
	coordDone := make(chan error, 1)
	go func() { coordDone <- coord.Run(coordCtx) }()
	t.Cleanup(func() {
		coordCancel()
		if err := <-coordDone; err != nil {
			t.Errorf("fleettest: coordinator: %v", err)
		}
	})
	select {
	case <-coord.Ready():
	case err := <-coordDone:
		coordDone <- err
		t.Fatalf("fleettest: RunFleet: the coordinator stopped: %v", err)
	case <-time.After(fleetReady):
		t.Fatalf("fleettest: RunFleet: the coordinator was not ready after %v", fleetReady)
	}

	f := &Fleet{Server: srv, Coordinator: coord, Pool: cfg.pool, Prefix: names.Prefix, silent: map[string]bool{}}
	for i := range cfg.agents {
		acfg := agent.Config{
			Name: fmt.Sprintf("%s-agent-%d", cfg.pool, i+1), Pool: cfg.pool,
			Concurrency: cfg.concurrency, Logger: cfg.logger, ShutdownTimeout: DefaultFleetShutdown,
		}
		for _, fn := range cfg.agentCfg {
			fn(i, &acfg)
		}
		acfg.Prefix = ccfg.Prefix
		a := agent.New(agentConns[i], acfg)
		f.silent[a.Name()] = acfg.PresenceInterval < 0
		for name, fn := range handlers {
			a.Handle(name, fn)
		}
		for _, fn := range cfg.setup {
			fn(a)
		}
		f.Agents = append(f.Agents, a)
		run(a.Name(), a.Run)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("fleettest: %v", runErr)
		}
	})
	if f.Client, err = client.New(srv.Conn(), ccfg.Prefix); err != nil {
		t.Fatalf("fleettest: RunFleet: %v", err)
	}
	f.waitPresent(t, names)
	return f
}

// waitPresent waits until every agent's presence is in the agents bucket
// (agents with PresenceInterval < 0 publish none and are not waited for).
func (f *Fleet) waitPresent(t testing.TB, names messages.Names) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fleetReady)
	defer cancel()
	WaitFor(t, fleetReady, func() error {
		kv, err := f.Server.JS().KeyValue(ctx, names.AgentsBucket())
		if err != nil {
			return err
		}
		for _, a := range f.Agents {
			if f.silent[a.Name()] {
				continue
			}
			if _, err := kv.Get(ctx, wire.AgentKey(f.Pool, a.Name())); err != nil {
				return fmt.Errorf("agent %s: %w", a.Name(), err)
			}
		}
		return nil
	})
}

// Run submits spec, waits for the job to end (at most timeout) and returns
// its final status. It fails the test if the submission is refused or the
// job does not end in time; a job that ends failed is returned, not a
// failure of the test.
func (f *Fleet) Run(t testing.TB, spec *messages.JobSpec, timeout time.Duration) *messages.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reply, err := f.Client.JobSubmitSpec(ctx, spec)
	if err != nil {
		t.Fatalf("fleettest: submitting the job: %v", err)
	}
	st, err := f.Client.JobWait(ctx, reply.JobID, 0, nil)
	if err != nil {
		t.Fatalf("fleettest: job %s did not end: %v", reply.JobID, err)
	}
	return st
}
