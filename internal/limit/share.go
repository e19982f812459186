package limit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Shares between pools (docs/limits.md, "Shares between pools").
//
// A limit's configuration — the record under NamedKey, written only by
// operators (fleetctl limit) and the coordinator — is never written by
// agents. Each pool spends from its own share, a record under ShareKey
// that only that pool's agents may write (the server's permissions,
// docs/security.md): the share's tokens, slots, waiters, adaptive rate and
// counts are the pool's. A share is configured like an inline limit, with
// the pool's part of the limit's configuration (Split): the pools that use
// the limit divide its rate, burst and concurrency in proportion to their
// weights (Record.Shares, 1 each unless the operator sets them), and a
// pool that has used none of it for ShareIdle leaves its part to the
// others. A hostile agent can therefore make its own pool look busy, so
// that the others keep only their own part, but never take, drain, delete
// or rewrite another pool's share or the configuration.

// MaxShareWeight bounds a pool's weight in a limit's division.
const MaxShareWeight = 1000

// sharePrefix starts the keys of the pools' shares.
const sharePrefix = "p."

// ShareKey is the bucket key of pool's share of the limit under key
// (NamedKey or InlineKey). ShareKey(pool, ">") is the subject wildcard of
// every share of pool.
func ShareKey(pool, key string) string { return sharePrefix + pool + "." + key }

// SplitShareKey returns the pool and the limit key of a ShareKey; ok is
// false for any other key.
func SplitShareKey(k string) (pool, key string, ok bool) {
	rest, ok := strings.CutPrefix(k, sharePrefix)
	if !ok {
		return "", "", false
	}
	pool, key, ok = strings.Cut(rest, ".")
	return pool, key, ok && pool != "" && key != ""
}

const (
	// ShareIdle is how long a pool that takes nothing of a limit, and
	// holds and waits for none of its slots, keeps its part of it: after
	// that its part goes to the pools that use the limit.
	ShareIdle = 2 * time.Second
	// shareRefresh is how often an agent reads the limit's configuration
	// and the other pools' shares again.
	shareRefresh = 250 * time.Millisecond
)

// Active reports whether a pool's share shows use at now: a take within
// ShareIdle, a slot held or an agent waiting for one.
func (r Record) Active(now time.Time) bool {
	if !r.Used.IsZero() && now.Sub(r.Used) < ShareIdle {
		return true
	}
	if r.InFlight(now) > 0 {
		return true
	}
	for _, until := range r.Waiters {
		if until.After(now) {
			return true
		}
	}
	return false
}

// Split is pool's part of cfg when the pools in active (pool among them
// or not) use it: its weight (weights[p], 1 when unset or not positive)
// over the sum of theirs, of the rate and the burst (at least 1), and of
// the concurrency cap by largest remainder in the order of the pools'
// names, at least 1 slot: the parts of the rate add up to the rate, those
// of the cap to the cap while it is at least the number of pools.
func Split(cfg messages.LimitConfig, weights map[string]int, pool string, active []string) messages.LimitConfig {
	cfg = cfg.WithDefaults()
	pools := slices.Clone(active)
	if !slices.Contains(pools, pool) {
		pools = append(pools, pool)
	}
	slices.Sort(pools)
	pools = slices.Compact(pools)
	weight := func(p string) int {
		if w := weights[p]; w > 0 {
			return w
		}
		return 1
	}
	total := 0
	for _, p := range pools {
		total += weight(p)
	}
	if len(pools) == 1 {
		return cfg
	}
	share := float64(weight(pool)) / float64(total)
	out := cfg
	out.Rate = messages.Rate(float64(cfg.Rate) * share)
	if cfg.Rate > 0 {
		out.Burst = max(1, int(math.Floor(float64(cfg.Burst)*share)))
	}
	if cfg.Concurrency > 0 {
		out.Concurrency = max(1, largestRemainder(cfg.Concurrency, pools, weight)[pool])
	}
	return out
}

// largestRemainder divides n between pools in proportion to their
// weights: the floors, then one more to the largest remainders, ties to
// the first in order.
func largestRemainder(n int, pools []string, weight func(string) int) map[string]int {
	total := 0
	for _, p := range pools {
		total += weight(p)
	}
	parts := make(map[string]int, len(pools))
	type rem struct {
		pool string
		frac float64
	}
	rems := make([]rem, 0, len(pools))
	given := 0
	for _, p := range pools {
		exact := float64(n) * float64(weight(p)) / float64(total)
		parts[p] = int(math.Floor(exact))
		given += parts[p]
		rems = append(rems, rem{p, exact - math.Floor(exact)})
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.frac > b.frac:
			return -1
		case a.frac < b.frac:
			return 1
		}
		return 0
	})
	for i := 0; given < n && i < len(rems); i++ {
		parts[rems[i].pool]++
		given++
	}
	return parts
}

// shareView is a pool-scoped store's view of one limit: its pool's part
// of the configuration, as of at, or the error that reading it gave;
// refreshing while a read runs in the background.
type shareView struct {
	at         time.Time
	cfg        messages.LimitConfig
	err        error
	refreshing bool
}

// share returns the configuration of s.pool's share of the limit under
// key: inline, or the named limit's record (ErrNotFound, ErrWrongPool),
// split between the pools that use the limit. Only the first take of a
// key reads the bucket; later ones decide on the last view while, once it
// is shareRefresh old, a read in the background renews it, so that a
// take never waits for it. A failed read keeps the last view.
func (s *Store) share(ctx context.Context, key string, inline *messages.LimitConfig) (messages.LimitConfig, error) {
	now := s.clock.Now()
	s.vmu.Lock()
	v, ok := s.views[key]
	if ok {
		if stale := now.Sub(v.at) >= shareRefresh || now.Before(v.at); stale && !v.refreshing && !s.closed {
			v.refreshing = true
			s.views[key] = v
			var cfg *messages.LimitConfig
			if inline != nil {
				c := *inline
				cfg = &c
			}
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), bounds.OpTimeout)
				defer cancel()
				s.readView(ctx, key, cfg)
			}()
		}
		s.vmu.Unlock()
		return v.cfg, v.err
	}
	s.vmu.Unlock()
	v = s.readView(ctx, key, inline)
	return v.cfg, v.err
}

// readView reads the view of the limit under key and keeps it; a failed
// read keeps the last view, if any.
func (s *Store) readView(ctx context.Context, key string, inline *messages.LimitConfig) shareView {
	now := s.clock.Now()
	cfg, err := s.readShare(ctx, key, inline)
	s.vmu.Lock()
	defer s.vmu.Unlock()
	if s.views == nil || len(s.views) >= maxViews {
		s.views = map[string]shareView{}
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrWrongPool) {
		if last, ok := s.views[key]; ok && last.err == nil {
			last.refreshing = false
			s.views[key] = last // until the bucket answers
			return last
		}
		delete(s.views, key)
		return shareView{err: err}
	}
	v := shareView{at: now, cfg: cfg, err: err}
	s.views[key] = v
	return v
}

// maxViews bounds a store's cached share views (inline keys are many).
const maxViews = 10_000

// readShare reads the limit's configuration and the other pools' shares.
func (s *Store) readShare(ctx context.Context, key string, inline *messages.LimitConfig) (messages.LimitConfig, error) {
	ctx, cancel := context.WithTimeout(ctx, bounds.OpTimeout)
	defer cancel()
	var cfg messages.LimitConfig
	var weights map[string]int
	if inline != nil {
		cfg = *inline
	} else {
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return cfg, ErrNotFound
		case err != nil:
			return cfg, fmt.Errorf("limit %s: %w", key, err)
		}
		var rec Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return cfg, fmt.Errorf("limit %s: %w", key, err)
		}
		if rec.Pool != "" && rec.Pool != s.pool {
			return cfg, fmt.Errorf("%w %q", ErrWrongPool, rec.Pool)
		}
		if rec.Pool != "" {
			return rec.LimitConfig, nil // one pool's: all of it
		}
		cfg, weights = rec.LimitConfig, rec.Shares
	}
	active, err := s.activePools(ctx, key)
	if err != nil {
		return cfg, err
	}
	return Split(cfg, weights, s.pool, active), nil
}

// activePools lists the pools whose share of the limit under key shows
// use now.
func (s *Store) activePools(ctx context.Context, key string) ([]string, error) {
	w, err := s.kv.WatchFiltered(ctx, []string{ShareKey("*", key)}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("limit %s: shares: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	now := s.now()
	var active []string
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("limit %s: shares: %w", key, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("limit %s: shares: the watch ended", key)
			}
			if e == nil {
				return active, nil
			}
			pool, _, ok := SplitShareKey(e.Key())
			if !ok || pool == s.pool {
				continue
			}
			var rec Record
			if json.Unmarshal(e.Value(), &rec) == nil && rec.Active(now) {
				active = append(active, pool)
			}
		}
	}
}

// Shares reads every pool's share of the limit under key, by pool.
func (s *Store) Shares(ctx context.Context, key string) (map[string]Record, error) {
	l, err := s.kv.ListKeysFiltered(ctx, ShareKey("*", key))
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	// Stop after the last key: a lister that found none, or whose watch
	// ended, says so; neither is a failure.
	if err := l.Stop(); err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) && !errors.Is(err, nats.ErrBadSubscription) {
		return nil, err
	}
	out := map[string]Record{}
	for _, k := range keys {
		pool, _, ok := SplitShareKey(k)
		if !ok {
			continue
		}
		rec, found, err := s.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if found {
			out[pool] = rec
		}
	}
	return out, nil
}

// Combine is the fleet's view of a limit: its configuration (conf, when
// the limit has a record of its own: a named limit) and what the pools'
// shares hold, by pool: the tokens and the slots of every share, the
// agents holding and waiting (as "<pool>/<agent>"), the counts added up,
// and, for an adaptive limit, the current rate of the shares in use. An
// inline limit has no record of its own: its configuration is the sum of
// its shares' parts. For fleetctl and the dashboard.
func Combine(conf *Record, shares map[string]Record, now time.Time) Record {
	var out Record
	if conf != nil {
		out.LimitConfig, out.Shares = conf.LimitConfig, conf.Shares
		if len(shares) == 0 {
			return *conf
		}
	}
	pools := make([]string, 0, len(shares))
	for p := range shares {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	var rate float64
	active := false
	for i, p := range pools {
		r := shares[p]
		if conf == nil {
			if i == 0 {
				out.LimitConfig = r.LimitConfig
				out.LimitConfig.Rate, out.Burst, out.Concurrency = 0, 0, 0
			}
			out.LimitConfig.Rate += r.LimitConfig.Rate
			out.Burst += r.WithDefaults().Burst
			out.Concurrency += r.Concurrency
		}
		out.Tokens += r.TokensAt(now)
		for a, h := range r.Holders {
			if out.Holders == nil {
				out.Holders = map[string]Holder{}
			}
			out.Holders[p+"/"+a] = h
		}
		for a, until := range r.Waiters {
			if out.Waiters == nil {
				out.Waiters = map[string]time.Time{}
			}
			out.Waiters[p+"/"+a] = until
		}
		st := r.Stats.roll(now)
		out.Stats.Calls += st.Calls
		out.Stats.Successes += st.Successes
		out.Stats.Overloads += st.Overloads
		out.Stats.PrevCalls += st.PrevCalls
		out.Stats.PrevSuccesses += st.PrevSuccesses
		out.Stats.PrevOverloads += st.PrevOverloads
		if r.Active(now) {
			rate += r.Rate()
			active = true
		}
		if r.Used.After(out.Used) {
			out.Used = r.Used
		}
	}
	out.Stats.Since = now
	out.At = now
	if out.Adaptive && active && rate < out.LimitConfig.Rate.PerSecond() {
		out.Current = rate
	}
	out.Tokens = min(out.Tokens, out.burst())
	return out
}

// View reads the limit under key as Combine shows it; found is false when
// neither the limit nor any share of it exists.
func (s *Store) View(ctx context.Context, key string) (rec Record, found bool, err error) {
	conf, ok, err := s.Get(ctx, key)
	if err != nil {
		return Record{}, false, err
	}
	shares, err := s.Shares(ctx, key)
	if err != nil {
		return Record{}, false, err
	}
	if !ok && len(shares) == 0 {
		return Record{}, false, nil
	}
	var c *Record
	if ok {
		c = &conf
	}
	return Combine(c, shares, s.now()), true, nil
}
