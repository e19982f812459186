package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DefaultWarnThreshold is the fill ratio (of MaxMsgs or MaxBytes, of the
// DLQ stream or of a pool's quota) above which the monitor warns: past the
// limit the pool's agents can no longer dead-letter and keep items parked
// with delayed naks.
const DefaultWarnThreshold = 0.8

// Usage is the DLQ stream's state, or a pool's dead letters' (Pool set),
// at one check.
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
	// ratio falls below it. It is called too, with Usage.Problem set, once
	// each time a pool is found with agents and no dead-letter stream
	// (CheckPools), armed again once the stream exists.
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
	above map[string]bool // by stream: at or above the threshold at the last check
	// missing: by pool, the checks in a row that found the pool with
	// agents and no dead-letter stream.
	missing map[string]int
}

// NewMonitor returns a monitor setting m's metrics.
func NewMonitor(js jetstream.JetStream, names messages.Names, m *Metrics, cfg MonitorConfig) *Monitor {
	if cfg.WarnThreshold <= 0 {
		cfg.WarnThreshold = DefaultWarnThreshold
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{js: js, names: names, metrics: m, cfg: cfg, above: map[string]bool{}, missing: map[string]int{},
		log: cfg.Logger.With().Str("component", "dlq_monitor").Logger()}
}

// Check reads the stream's state once, sets the gauges, and warns when the
// fill ratio has just reached the threshold; it does the same for each
// pool's dead letters against the pool's quota (CheckPools).
func (m *Monitor) Check(ctx context.Context) (*Usage, error) {
	stream, err := m.js.Stream(ctx, m.names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s: %w", m.names.DLQStream(), err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: stream info: %w", err)
	}
	u := m.usage(info)
	m.metrics.Depth.Set(float64(u.Messages))
	m.metrics.Bytes.Set(float64(u.Bytes))
	m.metrics.FillRatio.Set(u.FillRatio)
	m.metrics.OldestAge.Set(u.OldestAge.Seconds())
	m.warn(info.Config.Name, u)
	if _, err := m.CheckPools(ctx); err != nil {
		return u, err
	}
	return u, nil
}

// CheckPools reads every pool's dead-letter stream once, sets the pool
// gauges, and warns for each pool whose fill ratio has just reached the
// threshold. A pool that has agents (its work consumer) and no
// dead-letter stream at two checks in a row (not one being provisioned)
// is reported with Usage.Problem set, counted in the missing gauge, and
// warned about once. It returns the pools' usage, by pool name.
func (m *Monitor) CheckPools(ctx context.Context) ([]Usage, error) {
	var out []Usage
	seen := map[string]bool{}
	err := eachPool(ctx, m.js, m.names, true, func(pool string, info *jetstream.StreamInfo) {
		seen[pool] = true
		if info == nil {
			u := Usage{DLQStreamState: messages.DLQStreamState{Pool: pool, Problem: MissingPoolProblem(m.names, pool)}}
			if m.noteMissing(pool) {
				m.metrics.PoolMissing.WithLabelValues(pool).Set(1)
			}
			out = append(out, u)
			return
		}
		m.noteFound(pool)
		u := m.usage(info)
		u.Pool = pool
		m.metrics.PoolBytes.WithLabelValues(pool).Set(float64(u.Bytes))
		m.metrics.PoolFillRatio.WithLabelValues(pool).Set(u.FillRatio)
		m.warn(info.Config.Name, u)
		out = append(out, *u)
	})
	if err == nil {
		m.mu.Lock()
		for pool := range m.missing {
			if !seen[pool] { // its consumer is gone
				delete(m.missing, pool)
				m.metrics.PoolMissing.DeleteLabelValues(pool)
			}
		}
		m.mu.Unlock()
	}
	return out, err
}

// missingChecks is how many checks in a row must find a pool's
// dead-letter stream missing before it counts: the coordinator makes a
// pool's work consumer first and its dead-letter stream right after.
const missingChecks = 2

// noteMissing counts one more check that found pool with agents and no
// dead-letter stream, and reports whether the pool now counts as
// missing; the first time it does, it logs why and calls OnWarn.
func (m *Monitor) noteMissing(pool string) bool {
	m.mu.Lock()
	m.missing[pool]++
	n := m.missing[pool]
	m.mu.Unlock()
	if n < missingChecks {
		return false
	}
	if n == missingChecks {
		u := Usage{DLQStreamState: messages.DLQStreamState{Pool: pool, Problem: MissingPoolProblem(m.names, pool)}}
		m.log.Error().Str("pool", pool).Msg(u.Problem)
		if m.cfg.OnWarn != nil {
			m.cfg.OnWarn(u)
		}
	}
	return true
}

// MissingPools names the pools the last checks found with agents and no
// dead-letter stream (missingChecks in a row), in pool order.
func (m *Monitor) MissingPools() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for pool, n := range m.missing {
		if n >= missingChecks {
			out = append(out, pool)
		}
	}
	slices.Sort(out)
	return out
}

// noteFound clears what noteMissing counted of pool, whose dead-letter
// stream exists.
func (m *Monitor) noteFound(pool string) {
	m.mu.Lock()
	n, ok := m.missing[pool]
	delete(m.missing, pool)
	m.mu.Unlock()
	if ok {
		m.metrics.PoolMissing.WithLabelValues(pool).Set(0)
		if n >= missingChecks {
			m.log.Info().Str("pool", pool).Msg("the pool's dead-letter stream exists now: its dead letters have their quota")
		}
	}
}

// MissingPoolProblem says what is wrong with pool, which has agents and
// no dead-letter stream, and what to do (docs/dlq.md).
func MissingPoolProblem(n messages.Names, pool string) string {
	return fmt.Sprintf("pool %s has agents and no dead-letter stream %s: the coordinator could not make it, most often because the servers cannot reserve its quota (--dlq-max-bytes) of each node's max_file_store (the coordinator's log at the job's acceptance names the numbers). "+
		"Its dead letters have no quota of their own, and agents whose keys name only their pool's stream (fleetctl auth init) cannot dead-letter: they keep those items and the job does not finish. "+
		"Raise max_file_store, lower --dlq-max-bytes or use fewer pools; the leading coordinator makes the stream once there is room (docs/dlq.md)",
		pool, wire.PoolDLQStream(n, pool))
}

// eachPoolStream calls fn with every pool's dead-letter stream, in pool
// order.
func eachPoolStream(ctx context.Context, js jetstream.JetStream, n messages.Names, fn func(pool string, info *jetstream.StreamInfo)) error {
	return eachPool(ctx, js, n, false, fn)
}

// eachPool is eachPoolStream, and with withMissing, fn is also called
// with a nil info for each pool that has agents (its work consumer) and
// no dead-letter stream.
func eachPool(ctx context.Context, js jetstream.JetStream, n messages.Names, withMissing bool, fn func(pool string, info *jetstream.StreamInfo)) error {
	var pools []string
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(wire.PoolDLQStreamsFilter(n)))
	for name := range names.Name() {
		if pool, ok := strings.CutPrefix(name, wire.PoolDLQStreamPrefix(n)); ok && messages.ValidPool(pool) == nil {
			pools = append(pools, pool)
		}
	}
	var errs []error
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		// Without the list no pool can be called missing.
		return fmt.Errorf("dlq: pools' dead-letter streams: %w", err)
	}
	var agents []string
	if withMissing {
		var err error
		if agents, err = poolsWithAgents(ctx, js, n); err != nil {
			errs = append(errs, err)
		}
	}
	all := slices.Clone(pools)
	for _, pool := range agents {
		if !slices.Contains(pools, pool) {
			all = append(all, pool)
		}
	}
	slices.Sort(all)
	for _, pool := range all {
		if !slices.Contains(pools, pool) {
			fn(pool, nil)
			continue
		}
		stream, err := js.Stream(ctx, wire.PoolDLQStream(n, pool))
		if err != nil {
			errs = append(errs, fmt.Errorf("dlq: stream %s: %w", wire.PoolDLQStream(n, pool), err))
			continue
		}
		fn(pool, stream.CachedInfo())
	}
	return errors.Join(errs...)
}

// poolsWithAgents names the pools whose work consumer exists (the
// coordinator makes it when it provisions the pool).
func poolsWithAgents(ctx context.Context, js jetstream.JetStream, n messages.Names) ([]string, error) {
	s, err := js.Stream(ctx, n.WorkStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s: %w", n.WorkStream(), err)
	}
	var pools []string
	lister := s.ConsumerNames(ctx)
	for name := range lister.Name() {
		if pool, ok := strings.CutPrefix(name, n.AgentsConsumer("")); ok && messages.ValidPool(pool) == nil {
			pools = append(pools, pool)
		}
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("dlq: the work stream's pools: %w", err)
	}
	return pools, nil
}

func (m *Monitor) usage(info *jetstream.StreamInfo) *Usage {
	u := &Usage{DLQStreamState: *streamState(info)}
	if info.State.Msgs > 0 && !info.State.FirstTime.IsZero() {
		u.OldestAge = max(0, m.cfg.Now().Sub(info.State.FirstTime))
	}
	return u
}

// warn logs and reports (OnWarn) u when stream's fill ratio has just
// reached the threshold.
func (m *Monitor) warn(stream string, u *Usage) {
	m.mu.Lock()
	crossed := u.FillRatio >= m.cfg.WarnThreshold && !m.above[stream]
	m.above[stream] = u.FillRatio >= m.cfg.WarnThreshold
	m.mu.Unlock()
	if !crossed {
		return
	}
	ev := m.log.Warn().Uint64("messages", u.Messages).Int64("max_messages", u.MaxMessages).
		Uint64("bytes", u.Bytes).Int64("max_bytes", u.MaxBytes).Float64("fill_ratio", u.FillRatio)
	if u.Pool != "" {
		ev.Str("pool", u.Pool).Msgf("pool %s's dead letters are at %.0f%% of its quota: at the quota its agents cannot dead-letter and keep items parked; inspect, replay or purge (fleetctl dlq stats)", u.Pool, 100*u.FillRatio)
	} else {
		ev.Msgf("DLQ stream is %.0f%% full: at its limit agents cannot dead-letter and keep items parked; inspect, replay or purge (fleetctl dlq stats)", 100*u.FillRatio)
	}
	if m.cfg.OnWarn != nil {
		m.cfg.OnWarn(*u)
	}
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
	// The ordered consumer is added to the server on Consume, and the
	// coordinator adds pools' sources to the DLQ stream meanwhile.
	unlock := provision.LockStream(ctx, m.js, m.names.DLQStream())
	cons, err := m.js.OrderedConsumer(ctx, m.names.DLQStream(), cfg)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("dlq: monitor consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		m.metrics.DeadLettered.WithLabelValues(ReasonLabel(msg.Headers().Get(messages.HeaderReason))).Inc()
	})
	unlock()
	if err != nil {
		return nil, fmt.Errorf("dlq: monitor consumer: %w", err)
	}
	return func() { cc.Stop(); <-cc.Closed() }, nil
}
