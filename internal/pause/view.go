// Package pause mirrors the pause bucket (messages.Names.PauseBucket):
// which jobs and pools are paused, for the coordinators and the agents
// (docs/jobs.md "Pause and resume").
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// View is what a watch of the pause bucket last said. The zero value
// holds nothing paused and is not ready; Keep fills it. Safe for
// concurrent use.
type View struct {
	mu    sync.RWMutex
	jobs  map[string]time.Time
	pools map[string]time.Time
	once  sync.Once
	ready chan struct{}
	// newer holds the revisions of the marks of a newer schema version
	// already logged (key -> revision), so each is logged once.
	newer sync.Map
}

// NewView returns an empty view.
func NewView() *View {
	return &View{jobs: map[string]time.Time{}, pools: map[string]time.Time{}, ready: make(chan struct{})}
}

// Ready is closed once the view holds the bucket's keys as they were
// when the first watch started.
func (v *View) Ready() <-chan struct{} { return v.ready }

// By says what pauses the items of job on pool: messages.PausedByJob,
// messages.PausedByPool, or "" when neither is paused.
func (v *View) By(job, pool string) string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if _, ok := v.jobs[job]; ok {
		return messages.PausedByJob
	}
	if _, ok := v.pools[pool]; ok {
		return messages.PausedByPool
	}
	return ""
}

// Job reports whether job is paused (itself), and since when.
func (v *View) Job(job string) (time.Time, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.jobs[job]
	return t, ok
}

// Pool reports whether pool is paused, and since when.
func (v *View) Pool(pool string) (time.Time, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.pools[pool]
	return t, ok
}

// Pools returns the paused pools.
func (v *View) Pools() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]string, 0, len(v.pools))
	for p := range v.pools {
		out = append(out, p)
	}
	return out
}

// apply applies one entry to jobs and pools; it reports the kind and
// name it changed. A mark of a newer schema version pauses all the same
// (its key is the pause), but its record is not read (docs/contract.md §8);
// it is logged once.
func (v *View) apply(jobs, pools map[string]time.Time, e jetstream.KeyValueEntry, log zerolog.Logger) (kind, name string, paused, ok bool) {
	kind, name, ok = wire.ParsePauseKey(e.Key())
	if !ok {
		return "", "", false, false
	}
	m := jobs
	if kind == messages.PausedByPool {
		m = pools
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, name)
		return kind, name, false, true
	}
	var rec wire.PauseRecord
	_ = json.Unmarshal(e.Value(), &rec) // a key without a record is paused all the same
	if err := rec.V.Check("the pause mark " + e.Key()); err != nil {
		// The key is what pauses, whatever its record says: running the
		// items of a job or pool an operator paused would be the unsafe
		// way to not understand a mark. Only its fields are not read.
		if prev, seen := v.newer.Swap(e.Key(), e.Revision()); !seen || prev != e.Revision() {
			log.Warn().Err(err).Str("key", e.Key()).Msg("pause mark of a newer release: its key pauses, its record is not read")
		}
		rec = wire.PauseRecord{}
	}
	if rec.At.IsZero() {
		rec.At = e.Created()
	}
	m[name] = rec.At
	return kind, name, true, true
}

// Everything is what Keep passes as kind when a new watch replaced the
// whole view.
const Everything = "*"

// rewatchBackoff spaces the watches after one ended: 100ms doubling to 5s.
var rewatchBackoff = retry.Exponential(100*time.Millisecond, 5*time.Second)

// Keep follows kv into v until ctx ends, watching again when a watch
// ends. changed, when set, is called after each change with what changed
// (kind is messages.PausedByJob or PausedByPool).
func (v *View) Keep(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger, changed func(kind, name string, paused bool)) {
	b := retry.NewBackoff(rewatchBackoff, nil, nil)
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx)
		if err == nil {
			// The bucket's keys are replayed into a fresh view, which
			// replaces the old one at once when the replay ends: no
			// paused job looks unpaused meanwhile.
			replaying := true
			jobs, pools := map[string]time.Time{}, map[string]time.Time{}
			err = kvwatch.Watch(ctx, w, func() {
				if replaying {
					replaying = false
					v.mu.Lock()
					v.jobs, v.pools = jobs, pools
					v.mu.Unlock()
					v.once.Do(func() { close(v.ready) })
					b.Reset()
					if changed != nil {
						changed(Everything, "", false)
					}
				}
			}, func(e jetstream.KeyValueEntry) {
				if replaying {
					v.apply(jobs, pools, e, log)
					return
				}
				v.mu.Lock()
				kind, name, paused, ok := v.apply(v.jobs, v.pools, e, log)
				v.mu.Unlock()
				if ok && changed != nil {
					changed(kind, name, paused)
				}
			})
			if err == nil {
				return // ctx ended
			}
		}
		if !errors.Is(err, kvwatch.ErrClosed) && ctx.Err() == nil {
			log.Warn().Err(err).Msg("cannot watch the pause bucket; watching again")
		}
		if b.Wait(ctx) != nil {
			return
		}
	}
}
