package dlq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DefaultWarnThreshold is the fill ratio (of MaxMsgs or MaxBytes) above
// which the monitor warns: past the limit agents can no longer dead-letter
// and keep items parked with delayed naks.
const DefaultWarnThreshold = 0.8

// Usage is the DLQ stream's state at one check.
type Usage struct {
	messages.DLQStreamState
	// OldestAge is the age of the oldest stored entry (0 when empty).
	OldestAge time.Duration
}

// MonitorConfig configures a Monitor. The zero value is usable.
type MonitorConfig struct {
	// WarnThreshold is the fill ratio that triggers the warning. Defaults to 0.8.
	WarnThreshold float64
	// OnWarn is called (after the warning is logged) once each time the fill
	// ratio rises to WarnThreshold or above; it is armed again once the
	// ratio falls below it.
	OnWarn func(Usage)
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// CountSince is when counting dead letters starts: entries the server
	// stored from then on are counted, however late Run gets going. Zero =
	// from when Run starts.
	CountSince time.Time
}

// Monitor keeps the DLQ metrics current: gauges from the stream's state at
// every Check, and the dead-lettered counter from the entries the stream
// receives while Run runs. Safe for concurrent use.
type Monitor struct {
	js      jetstream.JetStream
	names   messages.Names
	metrics *Metrics
	cfg     MonitorConfig
	log     zerolog.Logger

	mu    sync.Mutex
	above bool
}

// NewMonitor returns a monitor setting m's metrics.
func NewMonitor(js jetstream.JetStream, names messages.Names, m *Metrics, cfg MonitorConfig) *Monitor {
	if cfg.WarnThreshold <= 0 {
		cfg.WarnThreshold = DefaultWarnThreshold
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{js: js, names: names, metrics: m, cfg: cfg, log: cfg.Logger.With().Str("component", "dlq_monitor").Logger()}
}

// Check reads the stream's state once, sets the gauges, and warns when the
// fill ratio has just reached the threshold.
func (m *Monitor) Check(ctx context.Context) (*Usage, error) {
	stream, err := m.js.Stream(ctx, m.names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s: %w", m.names.DLQStream(), err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: stream info: %w", err)
	}
	u := &Usage{DLQStreamState: *streamState(info)}
	if info.State.Msgs > 0 && !info.State.FirstTime.IsZero() {
		u.OldestAge = max(0, m.cfg.Now().Sub(info.State.FirstTime))
	}
	m.metrics.Depth.Set(float64(u.Messages))
	m.metrics.Bytes.Set(float64(u.Bytes))
	m.metrics.FillRatio.Set(u.FillRatio)
	m.metrics.OldestAge.Set(u.OldestAge.Seconds())

	m.mu.Lock()
	crossed := u.FillRatio >= m.cfg.WarnThreshold && !m.above
	m.above = u.FillRatio >= m.cfg.WarnThreshold
	m.mu.Unlock()
	if crossed {
		m.log.Warn().Uint64("messages", u.Messages).Int64("max_messages", u.MaxMessages).
			Uint64("bytes", u.Bytes).Int64("max_bytes", u.MaxBytes).Float64("fill_ratio", u.FillRatio).
			Msgf("DLQ stream is %.0f%% full: at its limit agents cannot dead-letter and keep items parked; inspect, replay or purge (fleetctl dlq stats)", 100*u.FillRatio)
		if m.cfg.OnWarn != nil {
			m.cfg.OnWarn(*u)
		}
	}
	return u, nil
}

// Run counts new entries by reason and checks the stream every interval
// until ctx ends.
func (m *Monitor) Run(ctx context.Context, interval time.Duration) error {
	stop, err := m.countEntries(ctx)
	if err != nil {
		return err
	}
	defer stop()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := m.Check(ctx); err != nil && ctx.Err() == nil {
			m.log.Debug().Err(err).Msg("DLQ check failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// countEntries follows the entries stored from now on (headers only: the
// reason travels in a header) and counts them by reason.
func (m *Monitor) countEntries(ctx context.Context) (stop func(), err error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{m.names.DLQFilter()},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		HeadersOnly:    true,
	}
	if since := m.cfg.CountSince; !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := m.js.OrderedConsumer(ctx, m.names.DLQStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("dlq: monitor consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		m.metrics.DeadLettered.WithLabelValues(ReasonLabel(msg.Headers().Get(messages.HeaderReason))).Inc()
	})
	if err != nil {
		return nil, fmt.Errorf("dlq: monitor consumer: %w", err)
	}
	return func() { cc.Stop(); <-cc.Closed() }, nil
}
