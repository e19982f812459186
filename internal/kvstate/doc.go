// Package kvstate keeps state that several processes share in a KV bucket
// and change only by compare-and-set: a job's retry budget, a circuit
// breaker, a rate or concurrency limit, a schedule. A [Store] is one
// bucket's keys as values of one Go type T, seen through a cache that a
// watch of the bucket keeps fresh, and written by [Store.Update], a loop
// of read, decide, compare-and-set.
//
// # What a Store does for its user
//
//   - A cached read. [Store.Get] answers from the cache while the watch
//     runs, so a hot path that only reads (a closed breaker, a budget known
//     to be exhausted) costs no request. A key is cached once it has been
//     asked for with Get or Update (tracked), until [Store.Forget].
//   - Stale revisions ignored. Every value seen (read, written, watched)
//     carries its revision; an older one never replaces a newer one, so a
//     late watch update or a read served by a lagging replica cannot move
//     the cache back.
//   - Reads that see the latest write. With Config.JetStream set, reads go
//     to the bucket stream's leader ($JS.API.STREAM.MSG.GET), which has
//     applied every acknowledged write; a KV Get may be answered by a
//     lagging replica of a replicated bucket (docs/jetstream.md §10).
//   - Retry on conflict. A refused compare-and-set (API error 10071 on one
//     node, 10164 "wrong last sequence" on three: internal/kvcas) marks the
//     cached value stale, waits a jittered backoff, reads again and calls
//     the decision again with the new value.
//   - Lost replies resolved by writer id. Each write attempt gets a writer
//     id unique across processes, which the decision stores in the value it
//     returns and which Config.WrittenBy finds again. When a write's outcome
//     is unknown (a timeout, a lost reply, a leader election), Update reads
//     again: if a value seen since the write went out (read or watched)
//     carries the id, the write landed and Update returns it as its own; if
//     not, Update decides again. An id stays registered until Update
//     returns, so a write that lands late is still recognised, at the next
//     conflict or from the watch. Without the watch a value carries only
//     the ids the user keeps in it (the budget keeps its last 16 claims).
//
// What stays with the user: the value's meaning and its decision (a pure
// function of the current value), what to do with the result, and any
// batching of callers above the Store (the budget coalesces its claims
// into one Update per job).
//
// # Using it for a new kind of state
//
// A named concurrency limit shared by a fleet (the package's Example runs
// it against an embedded server):
//
//	type slots struct {
//		Held    int      `json:"held"`
//		Max     int      `json:"max"`
//		Writers []string `json:"writers,omitempty"` // last few write ids
//	}
//
//	limits, err := kvstate.New(kvstate.Config[slots]{
//		KV:        kv,       // the bucket
//		JetStream: js,       // reads from the stream leader
//		Watch:     true,     // keep cached keys fresh
//		WrittenBy: func(v slots, id string) bool { return slices.Contains(v.Writers, id) },
//	})
//	...
//	defer limits.Close()
//
//	// Take a slot of limit "db", unless all are held.
//	c, err := limits.Update(ctx, "db", func(cur kvstate.Entry[slots], id string) (slots, bool, error) {
//		v := cur.Value
//		if !cur.Exists {
//			return v, false, errNoSuchLimit
//		}
//		if v.Held >= v.Max {
//			return v, false, nil // no write: c.Written is false
//		}
//		v.Held++
//		v.Writers = append(v.Writers[max(0, len(v.Writers)-7):], id)
//		return v, true, nil
//	})
//	taken := err == nil && c.Written
//
// The decision may run several times (once per conflict) and must only
// look at its arguments. A value that never changes once set (a budget's
// size) may be read from [Store.Cached] even when stale.
//
// A Store is safe for concurrent use; Close stops its watch.
package kvstate
