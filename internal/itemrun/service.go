package itemrun

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// serve registers the agent as a NATS micro service (AgentServiceName),
// so that `nats micro ls`, `info` and `stats` list every agent beside the
// coordinator: its info's metadata names the agent, its pool, host,
// handlers and concurrency, and the stats of its one endpoint (status,
// which replies with the agent's presence) carry its counters
// (messages.AgentStats). It costs nothing per item: the counters are the
// presence's. The returned stop unregisters it.
func (a *Agent) serve() (stop func(), err error) {
	host, _ := os.Hostname()
	a.mu.RLock()
	handlers := slices.Sorted(maps.Keys(a.handlers))
	a.mu.RUnlock()
	build := version.Get()
	svc, err := micro.AddService(a.nc, micro.Config{
		Name:        messages.AgentServiceName,
		Version:     build.Semver(),
		Description: "jetfleet agent of pool " + a.cfg.Pool,
		Metadata: map[string]string{
			"agent":       a.cfg.Name,
			"pool":        a.cfg.Pool,
			"prefix":      a.cfg.Prefix,
			"host":        host,
			"pid":         strconv.Itoa(os.Getpid()),
			"concurrency": strconv.Itoa(a.cfg.Concurrency),
			"handlers":    strings.Join(handlers, ","),
			"build":       build.String(),
			"go":          build.Go,
		},
		// Each agent answers on its own subject: no queue group.
		QueueGroupDisabled: true,
		StatsHandler:       func(*micro.Endpoint) any { return a.stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("agent: micro service: %w", err)
	}
	err = svc.AddEndpoint(messages.EndpointAgentStatus, micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(a.presence.value())
	}), micro.WithEndpointSubject(wire.AgentStatusSubject(a.names, a.cfg.Pool, a.cfg.Name)))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("agent: micro service endpoint: %w", err)
	}
	return func() { _ = svc.Stop() }, nil
}

// stats are the agent's counters as its micro service reports them.
func (a *Agent) stats() messages.AgentStats {
	v := a.presence.value()
	return messages.AgentStats{
		Pool: v.Pool, Concurrency: v.Concurrency,
		InFlight: v.InFlight, ItemsRun: v.Finished, Failures: v.Failed,
	}
}
