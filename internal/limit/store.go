package limit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Errors.
var (
	// ErrNotFound is a named limit that is not configured.
	ErrNotFound = errors.New("limit: no such limit")
	// ErrWrongPool is a named limit of another pool.
	ErrWrongPool = errors.New("limit: the limit belongs to another pool")
)

// Key prefixes in the limits bucket.
const (
	namedPrefix  = "n."
	inlinePrefix = "k."
)

// NamedKey is the bucket key of named limit name.
func NamedKey(name string) string { return namedPrefix + name }

// InlineKey is the bucket key of a step's inline limit with expanded key
// k (base64url: a key holds anything an item does).
func InlineKey(k string) string {
	return inlinePrefix + base64.RawURLEncoding.EncodeToString([]byte(k))
}

// KeyName is the name a bucket key stands for: the limit's name, or an
// inline limit's expanded key (also for a pool's share of it).
func KeyName(key string) (name string, named bool) {
	if _, k, ok := SplitShareKey(key); ok {
		key = k // a pool's share of the limit
	}
	if n, ok := strings.CutPrefix(key, namedPrefix); ok {
		return n, true
	}
	if k, ok := strings.CutPrefix(key, inlinePrefix); ok {
		if b, err := base64.RawURLEncoding.DecodeString(k); err == nil {
			return string(b), false
		}
	}
	return key, false
}

// bounds bound the store's KV traffic: a request within 2 s, a take,
// release or renewal (its conflicts and retried failures included) within
// 5 s, its rounds spaced from 1 ms doubling to 20 ms.
var bounds = kvstate.Bounded(2*time.Second, 5*time.Second, 20*time.Millisecond)

// Store reads and writes limit records in the limits bucket by
// compare-and-set (internal/kvstate). It is safe for concurrent use.
type Store struct {
	kv    jetstream.KeyValue
	s     *kvstate.Store[Record]
	clock clock.Clock
	// listeners (the Limiters over the store) hear every newer record of
	// a key in use that the store reads or writes, under the kvstate lock:
	// they must not block.
	lmu       sync.RWMutex
	listeners []func(key string, r Record)
	// pool, when set (WithPool), makes takes, releases and renewals spend
	// the pool's share of each limit (share.go); views caches the shares'
	// configurations.
	pool  string
	vmu   sync.Mutex
	views map[string]shareView
	// bg counts the views' background reads; closed stops new ones.
	bg     sync.WaitGroup
	closed bool
}

// StoreOption configures a Store.
type StoreOption func(*Store) error

// WithPool makes the store an agent's of pool: its takes, releases and
// renewals of a limit spend the pool's share of it (ShareKey), the only
// keys of the bucket a pool's agents may write (docs/security.md). A
// store without it (fleetctl, the dashboard) reads and configures limits.
func WithPool(pool string) StoreOption {
	return func(s *Store) error {
		if err := messages.ValidPool(pool); err != nil {
			return fmt.Errorf("limit: pool %q: %w", pool, err)
		}
		s.pool = pool
		return nil
	}
}

// NewStore returns a store over the limits bucket kv; js, when set, sends
// reads to the stream's leader. Close it when done.
func NewStore(js jetstream.JetStream, kv jetstream.KeyValue, clk clock.Clock, log zerolog.Logger, opts ...StoreOption) (*Store, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	st := &Store{kv: kv, clock: clk}
	for _, o := range opts {
		if err := o(st); err != nil {
			return nil, err
		}
	}
	s, err := kvstate.New(kvstate.Config[Record]{
		KV:        kv,
		JetStream: js,
		// No watch: every write delivered to every agent cost more than it
		// saves (docs/benchmarks.md). Other agents' writes are seen through
		// conflicts, and a take refused for a full limit reads the record
		// again (Limiter.Acquire), since a refusal writes nothing.
		Observe: func(key string, e kvstate.Entry[Record]) {
			if e.Exists {
				st.notify(st.limitKey(key), e.Value)
			}
		},
		WrittenBy: func(r Record, id string) bool { return slices.Contains(r.Writers, id) },
		Bounds:    bounds,
		MaxKeys:   100_000,
		Logger:    log.With().Str("component", "limit").Logger(),
	})
	if err != nil {
		return nil, err
	}
	st.s = s
	return st, nil
}

// listen adds fn to the listeners of newer records.
func (s *Store) listen(fn func(key string, r Record)) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.listeners = append(s.listeners, fn)
}

func (s *Store) notify(key string, r Record) {
	s.lmu.RLock()
	defer s.lmu.RUnlock()
	for _, fn := range s.listeners {
		fn(key, r)
	}
}

// reread makes the next take of key read the record rather than decide on
// the cached one, which, unwatched, other agents' releases do not update.
func (s *Store) reread(key string) { s.s.Forget(s.spentKey(key)) }

// spentKey is the key a take of the limit under key writes: the pool's
// share of it, or, without a pool, the limit's own record.
func (s *Store) spentKey(key string) string {
	if s.pool == "" {
		return key
	}
	return ShareKey(s.pool, key)
}

// limitKey is the limit key of a key the store wrote (spentKey's inverse).
func (s *Store) limitKey(k string) string {
	if s.pool == "" {
		return k
	}
	if pool, key, ok := SplitShareKey(k); ok && pool == s.pool {
		return key
	}
	return k
}

// Close stops the store, after the reads it runs in the background.
func (s *Store) Close() {
	s.vmu.Lock()
	s.closed = true
	s.vmu.Unlock()
	s.bg.Wait()
	s.s.Close()
}

// now is the store's time without a monotonic reading: it is stored.
func (s *Store) now() time.Time { return s.clock.Now().Round(0) }

// Take takes tokens (and a slot) of the limit under key. inline is the
// step's configuration of an inline limit, which creates the record or
// replaces its configuration; nil for a named limit, which must exist
// (ErrNotFound) and belong to pool when it names one (ErrWrongPool).
//
// A store of a pool (WithPool) spends the pool's share of the limit: its
// record is configured with the pool's part of the limit's configuration
// (Store.share), read from the named limit's record, which the store
// never writes.
func (s *Store) Take(ctx context.Context, key, pool string, inline *messages.LimitConfig, q Request) (Grant, Record, error) {
	ctx, cancel := context.WithTimeout(ctx, bounds.UpdateTimeout) // the share's first read too
	defer cancel()
	used := false
	if s.pool != "" {
		cfg, err := s.share(ctx, key, inline)
		if err != nil {
			return Grant{}, Record{}, fmt.Errorf("limit %s: %w", key, err)
		}
		inline, used = &cfg, true
	}
	var g Grant
	c, err := s.s.Update(ctx, s.spentKey(key), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		now := s.now()
		rec, changed := cur.Value, false
		switch {
		case inline != nil && (!cur.Exists || rec.LimitConfig != *inline):
			rec, changed = rec.Configure(now, *inline), true
		case inline == nil && !cur.Exists:
			return rec, false, ErrNotFound
		case inline == nil && rec.Pool != "" && pool != "" && rec.Pool != pool:
			return rec, false, fmt.Errorf("%w %q", ErrWrongPool, rec.Pool)
		}
		next, grant := rec.Take(now, q)
		g = grant
		if used && (grant.Granted() || grant.changed) {
			next.Used = now
		}
		return next.withWriter(id), grant.Granted() || grant.changed || changed, nil
	})
	if err != nil {
		return Grant{}, Record{}, fmt.Errorf("limit %s: %w", key, err)
	}
	return g, c.To.Value, nil
}

// Release ends calls of the limit under key: slots of the agent's are
// given back, and the outcome applied. A record deleted since is left
// deleted.
func (s *Store) Release(ctx context.Context, key, agent string, slots int, o Outcome, lease time.Duration) error {
	return s.release(ctx, key, agent, slots, 0, o, lease)
}

// release is Release, also giving back unused tokens the agent leased and
// no call used (Record.GiveBack).
func (s *Store) release(ctx context.Context, key, agent string, slots, unused int, o Outcome, lease time.Duration) error {
	_, err := s.s.Update(ctx, s.spentKey(key), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		if !cur.Exists {
			return cur.Value, false, nil
		}
		return cur.Value.Release(s.now(), agent, slots, o, lease).GiveBack(unused).withWriter(id), true, nil
	})
	if err != nil {
		return fmt.Errorf("limit %s: %w", key, err)
	}
	return nil
}

// Handover ends a call of agent's holding a slot of the limit under key
// while another of its calls waits for one (Record.Handover): kept reports
// that the slot stays the agent's for that call. A record deleted since is
// left deleted (nothing kept).
func (s *Store) Handover(ctx context.Context, key, agent string, o Outcome, lease time.Duration) (kept bool, err error) {
	_, err = s.s.Update(ctx, s.spentKey(key), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		if !cur.Exists {
			kept = false
			return cur.Value, false, nil
		}
		var next Record
		next, kept = cur.Value.Handover(s.now(), agent, o, lease)
		return next.withWriter(id), true, nil
	})
	if err != nil {
		return false, fmt.Errorf("limit %s: %w", key, err)
	}
	return kept, nil
}

// Set configures the named limit name, creating it if needed; a running
// limit keeps its tokens, leases and adaptive rate (within the new bounds).
func (s *Store) Set(ctx context.Context, name string, cfg messages.LimitConfig) (Record, error) {
	return s.SetShares(ctx, name, cfg, nil)
}

// SetShares is Set, also setting the pools' weights in the limit's
// division between pools (share.go; nil keeps them, an empty map clears
// them).
func (s *Store) SetShares(ctx context.Context, name string, cfg messages.LimitConfig, weights map[string]int) (Record, error) {
	for p, w := range weights {
		if err := messages.ValidPool(p); err != nil {
			return Record{}, fmt.Errorf("limit %s: shares: pool %q: %w", name, p, err)
		}
		if w < 1 || w > MaxShareWeight {
			return Record{}, fmt.Errorf("limit %s: shares: pool %s: weight %d, want 1 to %d", name, p, w, MaxShareWeight)
		}
	}
	c, err := s.s.Update(ctx, NamedKey(name), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		r := cur.Value.Configure(s.now(), cfg)
		if weights != nil {
			r.Shares = nil
			if len(weights) > 0 {
				r.Shares = weights
			}
		}
		return r.withWriter(id), true, nil
	})
	if err != nil {
		return Record{}, fmt.Errorf("limit %s: %w", name, err)
	}
	return c.To.Value, nil
}

// Get reads the record under key (from the stream's leader when the
// store has the JetStream context).
func (s *Store) Get(ctx context.Context, key string) (Record, bool, error) {
	e, err := s.s.Read(ctx, key)
	if err != nil {
		return Record{}, false, err
	}
	return e.Value, e.Exists, nil
}

// Delete removes the record under key.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, ok, err := s.Get(ctx, key); err != nil {
		return err
	} else if !ok {
		return ErrNotFound
	}
	s.s.Forget(key)
	if err := s.kv.Delete(ctx, key); err != nil {
		return err
	}
	// The pools' shares go with it.
	shares, err := s.Shares(ctx, key)
	if err != nil {
		return err
	}
	for pool := range shares {
		k := ShareKey(pool, key)
		s.s.Forget(k)
		if err := s.kv.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Keys lists the bucket's keys, sorted.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	l, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	if errors.Is(l.Stop(), jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	slices.Sort(keys)
	return keys, nil
}

// Now is the store's clock reading.
func (s *Store) Now() time.Time { return s.now() }

// Renew extends agent's lease on its slots of the limit under key.
func (s *Store) Renew(ctx context.Context, key, agent string, lease time.Duration) error {
	_, err := s.s.Update(ctx, s.spentKey(key), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		if _, held := cur.Value.Holders[agent]; !cur.Exists || !held {
			return cur.Value, false, nil
		}
		return cur.Value.Renew(s.now(), agent, lease).withWriter(id), true, nil
	})
	if err != nil {
		return fmt.Errorf("limit %s: %w", key, err)
	}
	return nil
}
