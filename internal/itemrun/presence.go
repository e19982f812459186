package itemrun

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// buildVersion is the agent's build as its presence names it.
var buildVersion = version.Get().String()

// presenceJobs bounds the jobs listed in an agent's presence value.
const presenceJobs = 20

// presence publishes the agent's AgentPresence in the agents bucket every
// PresenceInterval, so that dashboards and `nats kv ls` see who pulls which
// pool and how busy each agent is. It costs one KV put per interval, none
// per item. Safe for concurrent use.
type presence struct {
	a        *Agent
	started  time.Time
	handlers []string

	mu       sync.Mutex
	inFlight int64
	finished int64
	failed   int64
	jobs     map[string]int64
	stopping bool
}

func newPresence(a *Agent) *presence {
	return &presence{a: a, started: a.cfg.hooks.Clock.Now(), jobs: map[string]int64{}, handlers: a.Handlers()}
}

// begin and end count a delivery of job in flight.
func (p *presence) begin(job string) {
	p.mu.Lock()
	p.inFlight++
	p.jobs[job]++
	p.mu.Unlock()
}

func (p *presence) end(job string) {
	p.mu.Lock()
	p.inFlight--
	p.finished++
	if p.jobs[job]--; p.jobs[job] <= 0 {
		delete(p.jobs, job)
	}
	p.mu.Unlock()
}

// outcome counts an item's end: one with a failed or dead_lettered
// outcome is a failure. Nil-safe (an agent not yet set up).
func (p *presence) outcome(o string) {
	if p == nil || (o != messages.OutcomeFailed && o != messages.OutcomeDeadLettered) {
		return
	}
	p.mu.Lock()
	p.failed++
	p.mu.Unlock()
}

// value is the presence as of now.
func (p *presence) value() messages.AgentPresence {
	host, _ := os.Hostname()
	p.mu.Lock()
	defer p.mu.Unlock()
	v := messages.AgentPresence{
		Name: p.a.cfg.Name, Pool: p.a.cfg.Pool, Host: host, PID: os.Getpid(),
		Concurrency: p.a.cfg.Concurrency, InFlight: p.inFlight, Finished: p.finished, Failed: p.failed,
		StartedAt: p.started, LastSeen: p.a.cfg.hooks.Clock.Now(),
		Interval: messages.Duration(p.a.cfg.PresenceInterval), Stopping: p.stopping,
		Handlers: p.handlers, Version: buildVersion,
	}
	v.Capabilities = stepCapabilities
	if p.a.claude != "" {
		v.Capabilities = withClaude
	}
	if len(p.jobs) > 0 {
		// The busiest first, then by id.
		ids := slices.SortedFunc(maps.Keys(p.jobs), func(x, y string) int {
			return cmp.Or(cmp.Compare(p.jobs[y], p.jobs[x]), strings.Compare(x, y))
		})
		v.Jobs = make(map[string]int64, min(len(ids), presenceJobs))
		for _, j := range ids[:min(len(ids), presenceJobs)] {
			v.Jobs[j] = p.jobs[j]
		}
	}
	return v
}

// start publishes the presence until stop is called. When runCtx ends the
// agent is shutting down: the value says so at once, and stop deletes the
// key once in-flight items are done. Without the agents bucket the agent
// publishes no presence (it warns); nothing else changes.
func (p *presence) start(runCtx context.Context) (stop func()) {
	if p.a.cfg.PresenceInterval < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		kv, err := p.a.waitKV(ctx, p.a.names.AgentsBucket())
		if err != nil {
			if ctx.Err() == nil {
				p.a.log.Warn().Err(err).Msg("agent presence not published")
			}
			return
		}
		key := wire.AgentKey(p.a.cfg.Pool, p.a.cfg.Name)
		t := time.NewTicker(p.a.cfg.PresenceInterval)
		defer t.Stop()
		shutdown := runCtx.Done()
		failing := false
		for {
			err := p.put(kv, key)
			if err == nil {
				p.observeServerTime(ctx, kv, key)
			}
			p.a.noteStoreFull("presence", err)
			switch {
			case err != nil && !failing:
				p.a.log.Warn().Err(err).Msg("agent presence write failed; retrying every interval")
			case err == nil && failing:
				p.a.log.Info().Msg("agent presence written again")
			}
			failing = err != nil
			select {
			case <-ctx.Done():
				dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = kv.Delete(dctx, key)
				dcancel()
				return
			case <-shutdown:
				shutdown = nil
				p.mu.Lock()
				p.stopping = true
				p.mu.Unlock()
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func (p *presence) put(kv jetstream.KeyValue, key string) error {
	data, err := json.Marshal(p.value())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = kv.Put(ctx, key, data)
	return err
}

// observeServerTime reads the presence just written back: the server's
// stamp on it is a fresh bound of the server's time, which the agent's
// clock needs while the work it gets was stored long ago (a backlog,
// redeliveries), since a work message's stamp is when it was stored
// (docs/design.md, "Clocks").
func (p *presence) observeServerTime(ctx context.Context, kv jetstream.KeyValue, key string) {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if e, err := kv.Get(gctx, key); err == nil {
		clock.Observe(p.a.cfg.hooks.Clock, e.Created())
	}
}

// The capabilities an agent announces (messages.AgentPresence): the step
// kinds it runs, and claude when it has Claude Code's CLI.
var (
	stepCapabilities = []string{messages.CapabilityFallbackRuns, messages.CapabilityForeach, messages.CapabilityHandlers, messages.CapabilityWriteFile}
	withClaude       = []string{messages.CapabilityClaude, messages.CapabilityFallbackRuns, messages.CapabilityForeach, messages.CapabilityHandlers, messages.CapabilityWriteFile}
)
