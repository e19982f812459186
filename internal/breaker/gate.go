package breaker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// bounds bound the breaker's KV traffic: a request within 5 s, an update
// (its conflicts and retried failures included) within 10 s, its rounds
// spaced from 1 ms doubling to 50 ms.
var bounds = kvstate.Bounded(5*time.Second, 10*time.Second, 50*time.Millisecond)

// Record is the stored value: the state plus the id of the write that
// stored it, by which a writer whose reply was lost recognises its own
// write.
type Record struct {
	retry.BreakerState
	Writer string `json:"writer,omitempty"`
}

// StateName is the state's name, "closed" for the zero state.
func StateName(st retry.BreakerState) string {
	if st.State == "" {
		return retry.CircuitClosed
	}
	return st.State
}

// Gate reads and writes jobs' breaker states in the breaker bucket,
// under its pool's keys (<pool>.<job>, <pool>.<job>.<step>: the gate adds
// the pool), through a kvstate.Store: each job's state is cached and kept fresh by a
// watch of the bucket, so that a closed breaker costs no request (a
// delivery reads the cache), and only a change of state is written, with
// compare-and-set against the revision it was computed from; reads go to
// the stream leader. A Gate is safe for concurrent use; Close stops
// it.
type Gate struct {
	store    *kvstate.Store[Record]
	pool     string
	clock    clock.Clock
	onChange func(job string, from, to retry.BreakerState)
	// onClosed is called, without blocking, when a job's breaker is seen
	// to close (written, read or watched) after it was seen open or
	// half-open: the agent releases the items it parked.
	onClosed func(job string)

	mu   sync.Mutex
	seen map[string]string // key → state name last seen
}

func NewGate(js jetstream.JetStream, kv jetstream.KeyValue, pool string, clk clock.Clock, log zerolog.Logger,
	onChange func(job string, from, to retry.BreakerState), onClosed func(job string)) (*Gate, error) {
	log = log.With().Str("component", "breaker").Logger()
	g := &Gate{pool: pool, clock: clk, onChange: onChange, onClosed: onClosed, seen: map[string]string{}}
	store, err := kvstate.New(kvstate.Config[Record]{
		Observe:   g.observe,
		KV:        kv,
		JetStream: js,
		Watch:     true, // a closed breaker is admitted from the cache
		Decode: func(data []byte) (Record, error) {
			var rec Record
			if err := json.Unmarshal(data, &rec); err != nil {
				// A corrupt value reads as closed; the next write replaces it.
				log.Warn().Err(err).Msg("corrupt circuit breaker state read as closed")
				return Record{}, nil
			}
			return rec, nil
		},
		WrittenBy: func(rec Record, id string) bool { return rec.Writer == id },
		Bounds:    bounds,
		MaxKeys:   4096, // jobs are few; bound the cache anyway
		Logger:    log,
	})
	if err != nil {
		return nil, err
	}
	g.store = store
	return g, nil
}

// observe follows the state of the gate's job breakers (not the steps':
// a step breaker fails its step fast and parks nothing) and calls
// onClosed when one closes, or its key is deleted, after it was seen open
// or half-open. It runs under the store's lock: quick, no store calls.
func (g *Gate) observe(key string, e kvstate.Entry[Record]) {
	job, ok := strings.CutPrefix(key, g.pool+".")
	if !ok || strings.Contains(job, ".") {
		return
	}
	state := retry.CircuitClosed
	if e.Exists {
		state = StateName(e.Value.BreakerState)
	}
	g.mu.Lock()
	prev, known := g.seen[key]
	if !known && len(g.seen) >= 4096 {
		clear(g.seen) // as the store's cache: jobs are few, bound it anyway
	}
	g.seen[key] = state
	g.mu.Unlock()
	if known && prev != retry.CircuitClosed && state == retry.CircuitClosed && g.onClosed != nil {
		g.onClosed(job)
	}
}

// Close stops the watch and waits for it. It is idempotent.
func (g *Gate) Close() { g.store.Close() }

// Forget drops the cached states of a job's breakers (its own and its
// steps'); the next delivery reads them from KV. An update under way keeps
// its entry: compare-and-set keeps both correct.
func (g *Gate) Forget(job string) {
	g.mu.Lock()
	delete(g.seen, g.key(job))
	g.mu.Unlock()
	g.store.Forget(g.key(job))
	g.store.ForgetPrefix(g.key(job) + ".")
}

// key is the bucket key of a breaker of the gate's pool: <pool>.<k>, k
// being a job id or <job>.<step>.
func (g *Gate) key(k string) string { return g.pool + "." + k }

// Update applies fn to the job's current state and stores the result if it
// differs, by compare-and-set; a conflict re-reads from the stream leader
// and applies fn again. It returns the state fn was last applied to and
// its result, which is stored (or was already so). fn may be called more
// than once and must not keep what it computed in earlier calls. A write
// whose reply was lost and whose state another agent has overwritten since
// is decided again: a probe slot it took is then written off after the
// timeout, never granted twice. Conflicts and transient failures are
// retried for at most bounds.UpdateTimeout.
func (g *Gate) Update(ctx context.Context, job string,
	fn func(now time.Time, st retry.BreakerState) retry.BreakerState) (from, to retry.BreakerState, err error) {
	c, err := g.store.Update(ctx, g.key(job), func(cur kvstate.Entry[Record], id string) (Record, bool, error) {
		st := cur.Value.BreakerState
		next := fn(g.clock.Now().Round(0), st) // no monotonic reading: it is stored
		return Record{BreakerState: next, Writer: id}, !sameState(next, st), nil
	})
	if err != nil {
		return from, from, fmt.Errorf("breaker %s: %w", job, err)
	}
	from, to = c.From.Value.BreakerState, c.To.Value.BreakerState
	if c.Written && StateName(from) != StateName(to) && g.onChange != nil {
		g.onChange(job, from, to)
	}
	return from, to, nil
}

// sameState compares states by value, times by instant.
func sameState(a, b retry.BreakerState) bool {
	return StateName(a) == StateName(b) && a.Failures == b.Failures && a.Probes == b.Probes &&
		a.Successes == b.Successes && a.OpenedAt.Equal(b.OpenedAt) && a.HalfOpenAt.Equal(b.HalfOpenAt)
}
