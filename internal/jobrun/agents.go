package jobrun

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/stepkind"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// agentDirectory keeps, from a watch of the agents bucket, the handlers
// each present agent announces (messages.AgentPresence.Handlers), so that
// admission can refuse a step naming a handler no agent of its pool has
// without a read per submission. Safe for concurrent use.
type agentDirectory struct {
	mu sync.RWMutex
	kv jetstream.KeyValue
	// pools maps a pool to its agents' keys and what the directory knows
	// of each.
	pools map[string]map[string]agentEntry
}

// agentEntry is one agent's last presence as the hub stored it.
type agentEntry struct {
	name     string
	runs     agentRuns
	interval time.Duration
	stopping bool
	stored   time.Time // the server's time of the presence write
}

// agentRuns is what one agent runs: its handlers and capabilities.
type agentRuns struct {
	handlers, capabilities []string
}

func runsOf(p *messages.AgentPresence) agentRuns {
	return agentRuns{handlers: p.Handlers, capabilities: p.Capabilities}
}

func newAgentDirectory() *agentDirectory {
	return &agentDirectory{pools: map[string]map[string]agentEntry{}}
}

// keep follows the agents bucket until ctx ends, watching again after a
// watch ends.
func (d *agentDirectory) keep(ctx context.Context, js jetstream.JetStream, bucket string, log zerolog.Logger) {
	for {
		err := d.follow(ctx, js, bucket)
		if ctx.Err() != nil {
			return
		}
		log.Warn().Err(err).Msg("agent directory: watch of the agents bucket ended; watching again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(rewatchDelay):
		}
	}
}

func (d *agentDirectory) follow(ctx context.Context, js jetstream.JetStream, bucket string) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("coordinator: %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: watching %s: %w", bucket, err)
	}
	d.mu.Lock()
	d.kv = kv
	d.pools = map[string]map[string]agentEntry{}
	d.mu.Unlock()
	return kvwatch.Watch(ctx, w, nil, d.apply)
}

// apply records one watched presence.
func (d *agentDirectory) apply(e jetstream.KeyValueEntry) {
	pool, _, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return
	}
	var p messages.AgentPresence
	del := e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &p) != nil
	d.mu.Lock()
	defer d.mu.Unlock()
	agents := d.pools[pool]
	if del {
		delete(agents, e.Key())
		if len(agents) == 0 {
			delete(d.pools, pool)
		}
		return
	}
	if agents == nil {
		agents = map[string]agentEntry{}
		d.pools[pool] = agents
	}
	agents[e.Key()] = agentEntry{name: p.Name, runs: runsOf(&p), interval: p.Interval.D(), stopping: p.Stopping, stored: e.Created()}
}

// unreachable lists the agents of pool whose presence the hub stored
// last more than messages.UnreachableAfter of their intervals before now,
// longest silent first; stopping agents are not listed.
func (d *agentDirectory) unreachable(pool string, now time.Time) []messages.UnreachableAgent {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []messages.UnreachableAgent
	for _, a := range d.pools[pool] {
		if a.stopping || a.interval <= 0 || now.Sub(a.stored) <= messages.UnreachableAfter*a.interval {
			continue
		}
		out = append(out, messages.UnreachableAgent{Name: a.name, Since: a.stored})
	}
	slices.SortFunc(out, func(x, y messages.UnreachableAgent) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// directRead bounds the read of a pool's presences that the watch has
// none of.
const directRead = 2 * time.Second

// handlers returns the handlers of each present agent of pool. When the
// watch knows of no agent of pool (none yet, or one that announced itself
// a moment ago and whose presence the watch has not brought yet) it reads
// the bucket, so that an agent present before a submission is never
// missed. ok is false when pool's agents are unknown (the bucket cannot be
// read).
func (d *agentDirectory) handlers(ctx context.Context, pool string) (agents []agentRuns, ok bool) {
	d.mu.RLock()
	for _, a := range d.pools[pool] {
		agents = append(agents, a.runs)
	}
	kv := d.kv
	d.mu.RUnlock()
	if len(agents) > 0 {
		return agents, true
	}
	if kv == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, directRead)
	defer cancel()
	lister, err := kv.ListKeysFiltered(ctx, pool+".>")
	if err != nil {
		return nil, false
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone meanwhile
		}
		var p messages.AgentPresence
		if json.Unmarshal(e.Value(), &p) == nil {
			agents = append(agents, runsOf(&p))
		}
	}
	return agents, ctx.Err() == nil
}

// handlerProblems lists the steps of spec (internal/stepkind.Walk: those
// nested in foreach bodies and exit-code handlers too) naming a handler
// that no present agent of the job's pool registers, and those needing a
// capability none of them announces (internal/stepkind.Needs): claude
// steps and fallbacks (Claude Code's CLI), write_file and foreach steps,
// exit-code handlers and fail_workflow fallbacks (agents before v0.4.0 run
// none of these). A pool with no agent present accepts anything: the job
// waits for agents to come. Items routed to a group's pool (group_by) may
// run elsewhere, so only the job's own pool is checked.
func (c *Coordinator) handlerProblems(ctx context.Context, spec *messages.JobSpec) []messages.FieldError {
	pool := spec.Pool
	if pool == "" {
		pool = messages.DefaultPool
	}
	var agents []agentRuns
	known := false
	var problems []messages.FieldError
	stepkind.Walk(spec, func(field string, s *messages.Step) {
		needs := stepkind.Needs(s)
		if s.Handler == "" && len(needs) == 0 {
			return
		}
		if !known {
			var ok bool
			if agents, ok = c.agents.handlers(ctx, pool); !ok {
				agents = nil
			}
			known = true
		}
		if len(agents) == 0 {
			return
		}
		for _, need := range needs {
			if !slices.ContainsFunc(agents, func(a agentRuns) bool { return slices.Contains(a.capabilities, need) }) {
				problems = append(problems, messages.FieldError{Field: capabilityField(field, s, need), Message: capabilityMissing(pool, need)})
			}
		}
		if s.Handler != "" && !slices.ContainsFunc(agents, func(a agentRuns) bool { return slices.Contains(a.handlers, s.Handler) }) {
			problems = append(problems, messages.FieldError{Field: field + ".handler",
				Message: fmt.Sprintf("no agent of pool %q registers handler %q", pool, s.Handler)})
		}
	})
	return problems
}

// capabilityField is the field of step s (at field) that needs capability need.
func capabilityField(field string, s *messages.Step, need string) string {
	switch {
	case need == messages.CapabilityClaude && s.Claude == "":
		return field + ".retry_config.on_failure.fallback.claude"
	case need == messages.CapabilityHandlers && len(s.OnExitCode) == 0 && len(s.RetryConfig.OnFailure.Steps) > 0:
		return field + ".retry_config.on_failure.fallback.steps"
	case need == messages.CapabilityHandlers && len(s.OnExitCode) == 0:
		return field + ".retry_config.on_failure.fallback.fail_workflow"
	case need == messages.CapabilityHandlers:
		return field + ".on_exit_code"
	case need == messages.CapabilityFallbackRuns && s.RetryConfig.OnFailure.MaxAttempts > 1:
		return field + ".retry_config.on_failure.fallback.max_attempts"
	case need == messages.CapabilityFallbackRuns:
		return field + ".retry_config.on_failure.fallback.timeout"
	}
	return field + "." + need
}

// capabilityMissing says that no agent of pool runs what capability need names.
func capabilityMissing(pool, need string) string {
	if need == messages.CapabilityClaude {
		return fmt.Sprintf("no agent of pool %q runs claude steps (an agent does when Claude Code's CLI is on its PATH, or at its --claude-command)", pool)
	}
	return fmt.Sprintf("no agent of pool %q runs %s (agents before v0.4.0 do not: upgrade the pool's agents)", pool, map[string]string{
		messages.CapabilityWriteFile: "write_file steps", messages.CapabilityForeach: "foreach steps",
		messages.CapabilityHandlers:     "on_exit_code handlers, fallbacks with fail_workflow or fallbacks of several steps",
		messages.CapabilityFallbackRuns: "fallbacks that rerun their step (max_attempts) or have a timeout of their own",
	}[need])
}
