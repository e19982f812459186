package jobrun

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/replay"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The DLQ service's defaults.
const (
	// DefaultDLQMonitorInterval is how often the DLQ stream's depth, bytes
	// and oldest entry are read for the metrics and the 80% warning.
	DefaultDLQMonitorInterval = 15 * time.Second
	// DLQScanLimit bounds the DLQ entries one dlq.list request examines,
	// matching or not: a rare filter gets a short page and a next_seq to
	// go on from instead of a scan of the whole DLQ.
	DLQScanLimit = 10_000
	// DLQEventsJob is the job token of DLQ events that concern no single
	// job (internal/replay).
	DLQEventsJob = replay.DLQEventsJob
)

// dlqService holds the DLQ's inspector, replayer and metrics, which the
// dlq.* endpoints (internal/api), the monitor and the replays
// (internal/replay) use, and the item pools of finished jobs that
// replays route by.
type dlqService struct {
	insp    *dlq.Inspector
	rep     *dlq.Replayer
	metrics *dlq.Metrics

	poolsMu sync.Mutex
	pools   map[string]*poolsLoad // finished jobs' item pools, for replays (origin.go)
}

// dlqDeps are what the DLQ service is built from: the connection, the
// coordinator's clock and logger, and the coordinator's part of a replay
// (reopening a job, routing an entry, signing what it publishes).
type dlqDeps struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	names      messages.Names
	clock      clock.Clock
	log        zerolog.Logger
	reopen     dlq.ReopenFunc
	route      dlq.RouteFunc
	signer     dlq.SignFunc
	registerer prometheus.Registerer
}

func newDLQService(d dlqDeps) *dlqService {
	pageBytes := int(d.nc.MaxPayload()) - 64<<10
	if pageBytes < 64<<10 {
		pageBytes = 64 << 10
	}
	s := &dlqService{pools: map[string]*poolsLoad{}}
	s.insp = dlq.NewInspector(d.js, d.names, dlq.WithPageBytes(pageBytes), dlq.WithNow(d.clock.Now), dlq.WithScanLimit(DLQScanLimit))
	s.rep = dlq.NewReplayer(d.js, d.names, s.insp, dlq.WithReopen(d.reopen), dlq.WithRoute(d.route), dlq.WithLogger(d.log), dlq.WithSigner(d.signer))
	s.metrics = dlq.NewMetrics(d.registerer)
	return s
}

// startDLQ runs the DLQ monitor until ctx ends.
func (c *Coordinator) startDLQ(ctx context.Context) {
	mon := dlq.NewMonitor(c.js, c.names, c.dlq.metrics, dlq.MonitorConfig{
		Logger: c.log, Now: c.cfg.hooks.Clock.Now, CountSince: time.Now(),
		OnWarn: func(u dlq.Usage) {
			if u.Problem != "" {
				c.event(DLQEventsJob, messages.DLQPoolMissingEvent(u.DLQStreamState))
				return
			}
			c.event(DLQEventsJob, messages.DLQNearlyFullEvent(u.DLQStreamState))
		},
	})
	interval := c.cfg.DLQMonitorInterval
	if interval <= 0 {
		interval = DefaultDLQMonitorInterval
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := mon.Run(ctx, interval); err != nil && ctx.Err() == nil {
			c.log.Error().Err(err).Msg("DLQ monitor stopped")
		}
	}()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.keepDLQSources(ctx, interval, mon)
	}()
}

// keepDLQSources keeps the DLQ stream's configuration, its pools'
// dead-letter streams as sources above all, while this coordinator leads:
// a coordinator of the previous release that starts meanwhile sets it its
// own way (provision.EnsureDLQ). One warning per run of failures. It also
// provisions again each pool the monitor finds without its dead-letter
// stream, so that the stream is made once the operator has made room for
// its quota (docs/dlq.md).
func (c *Coordinator) keepDLQSources(ctx context.Context, interval time.Duration, mon *dlq.Monitor) {
	failing := false
	tick := time.NewTicker(interval) // the DLQ monitor's pace (dlq.Monitor.Run)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := provision.EnsureDLQ(ctx, c.js, c.names, c.cfg.Provision.config())
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			c.log.Warn().Err(err).Msg("cannot keep the DLQ stream's sources (the pools' dead-letter streams); retrying every DLQ monitor interval")
			failing = true
		case err == nil:
			failing = false
		}
		for _, pool := range mon.MissingPools() {
			if err := c.pools.Ensure(ctx, pool); err != nil && ctx.Err() == nil {
				c.log.Debug().Err(err).Str("pool", pool).Msg("the pool's dead-letter stream still cannot be made")
			}
		}
	}
}
