package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// agentDirectory keeps, from a watch of the agents bucket, the handlers
// each present agent announces (messages.AgentPresence.Handlers), so that
// admission can refuse a step naming a handler no agent of its pool has
// without a read per submission. Safe for concurrent use.
type agentDirectory struct {
	mu    sync.RWMutex
	ready bool
	// pools maps a pool to its agents' keys and their handlers.
	pools map[string]map[string][]string
}

func newAgentDirectory() *agentDirectory {
	return &agentDirectory{pools: map[string]map[string][]string{}}
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
	d.ready = false
	d.pools = map[string]map[string][]string{}
	d.mu.Unlock()
	return kvwatch.Watch(ctx, w, func() {
		d.mu.Lock()
		d.ready = true
		d.mu.Unlock()
	}, d.apply)
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
		agents = map[string][]string{}
		d.pools[pool] = agents
	}
	agents[e.Key()] = p.Handlers
}

// missing reports whether pool has present agents and none registers
// handler. A pool with no agent, or a directory still reading the
// bucket, misses nothing: the job waits for agents to come.
func (d *agentDirectory) missing(pool, handler string) bool {
	if d == nil {
		return false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	agents := d.pools[pool]
	if !d.ready || len(agents) == 0 {
		return false
	}
	for _, hs := range agents {
		for _, h := range hs {
			if h == handler {
				return false
			}
		}
	}
	return true
}

// handlerProblems lists the steps of spec naming a handler that no present
// agent of the job's pool registers: agent_template, reduce and a custom
// on_item_failure step. Items routed to a group's pool (group_by) may run
// elsewhere, so only the job's own pool is checked.
func (c *Coordinator) handlerProblems(spec *messages.JobSpec) []messages.FieldError {
	pool := spec.Pool
	if pool == "" {
		pool = messages.DefaultPool
	}
	var problems []messages.FieldError
	check := func(field string, s *messages.Step) {
		if s != nil && s.Handler != "" && c.agents.missing(pool, s.Handler) {
			problems = append(problems, messages.FieldError{Field: field + ".handler",
				Message: fmt.Sprintf("no agent of pool %q registers handler %q", pool, s.Handler)})
		}
	}
	for i := range spec.AgentTemplate {
		check("agent_template["+strconv.Itoa(i)+"]", &spec.AgentTemplate[i])
	}
	for i := range spec.Reduce {
		check("reduce["+strconv.Itoa(i)+"]", &spec.Reduce[i])
	}
	if ep := spec.ErrorPolicy; ep != nil && ep.OnItemFailure != nil {
		check("error_policy.on_item_failure.custom", ep.OnItemFailure.Custom)
	}
	return problems
}
