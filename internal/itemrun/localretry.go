package itemrun

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// Local retries (docs/retries.md §1, "Short retries stay on their agent"):
// a retry or snooze whose delay is at most Config.LocalRetryMax is run
// again by the agent whose run failed, without a delayed nak. As before
// any retry, the budget is claimed first; then the delivery waits in the
// agent, holding no slot, until its delay is up, and goes into the
// agent's buffer behind the messages already there. The item's state, as
// it would have been written, travels with it (unwritten) and is written
// when the delivery leaves the agent: before a nak (nakDelay, and the
// Nak methods of a waiting localRetry), a give-up, a park or a hold. The
// server is spared the state write, the nak, the redelivery and the state
// read: the retry costs it nothing but its share of the budget's
// coalesced compare-and-set. With Config.LocalRetryDurable the state is
// written before each local retry instead.
//
// A local retry is not a delivery: MaxDeliver does not count it, attempts
// and the budgets do. At most MaxLocalRetries follow each other; the next
// retry is a delayed nak, which any agent of the pool may take, so that
// failures that are this agent's own (a full disk, a missing tool) reach
// another. If the agent dies while a local retry waits, AckWait brings
// the message to another agent, which reads the state last written: up
// to MaxLocalRetries failed runs are missing from its count and history
// (docs/retries.md §1.2). At shutdown a waiting local retry has its state
// written and is naked with the delay it has left.

// MaxLocalRetries is how many local retries may follow each other before
// a retry goes back to the work stream.
const MaxLocalRetries = 3

// localRetry is a delivery waiting to run again on this agent: the
// message, what its last run knew of it, and its state as written before
// the retry. It is a jetstream.Msg (the delivery's), so that it travels
// the pull loop's buffer as any message does.
type localRetry struct {
	jetstream.Msg
	md  *jetstream.MsgMetadata
	wi  wire.WorkItem
	st  wire.ItemState
	rev uint64
	key string
	// n counts the local retries in a row, this one included.
	n int
	// reset is when the agent took the delivery (item.reset).
	reset time.Time
	due   time.Time
	timer interface{ Stop() bool }
	// unwritten: st holds runs of this delivery that are not in the
	// items bucket yet. Whoever holds the delivery writes them before a
	// nak (write, set by the agent): the retry's item once it runs again
	// (process takes the flag over), this message while it waits.
	unwritten bool
	write     func(*localRetry) bool
}

// flush writes r's runs not written yet, and reports whether r may be
// naked: false when another agent holds the item now.
func (r *localRetry) flush() bool {
	if !r.unwritten || r.write == nil {
		return true
	}
	r.unwritten = false
	return r.write(r)
}

// Nak hands the delivery back, its state written first.
func (r *localRetry) Nak() error {
	if !r.flush() {
		return nil
	}
	return r.Msg.Nak()
}

// NakWithDelay hands the delivery back after d, its state written first.
func (r *localRetry) NakWithDelay(d time.Duration) error {
	if !r.flush() {
		return nil
	}
	return r.Msg.NakWithDelay(d)
}

// localRetries holds local retries until they are due, then hands them to
// the pull loop (ready, take). It is safe for concurrent use.
type localRetries struct {
	now       func() time.Time
	afterFunc func(time.Duration, func()) interface{ Stop() bool } // time.AfterFunc; a test's gate
	mu        sync.Mutex
	waiting   map[*localRetry]struct{}
	due       []*localRetry
	closed    bool
	wake      chan struct{} // capacity 1: due became non-empty
}

func newLocalRetries() *localRetries {
	return &localRetries{
		now:       time.Now,
		afterFunc: func(d time.Duration, f func()) interface{ Stop() bool } { return time.AfterFunc(d, f) },
		waiting:   make(map[*localRetry]struct{}),
		wake:      make(chan struct{}, 1),
	}
}

// add makes r due after d. It reports false once the queue is closed: the
// caller naks instead.
func (q *localRetries) add(r *localRetry, d time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	r.due = q.now().Add(d)
	q.waiting[r] = struct{}{}
	r.timer = q.afterFunc(d, func() { q.fire(r) })
	return true
}

func (q *localRetries) fire(r *localRetry) {
	q.mu.Lock()
	if _, ok := q.waiting[r]; !ok { // closed meanwhile: naked by close
		q.mu.Unlock()
		return
	}
	delete(q.waiting, r)
	q.due = append(q.due, r)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// ready is signalled when local retries are due; nil (never) for a nil queue.
func (q *localRetries) ready() <-chan struct{} {
	if q == nil {
		return nil
	}
	return q.wake
}

// take returns the local retries now due, in the order they came due.
func (q *localRetries) take() []*localRetry {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.due
	q.due = nil
	return d
}

// close naks every local retry still held: those waiting with the delay they
// have left, those due at once. Later adds report false.
func (q *localRetries) close() {
	q.mu.Lock()
	q.closed = true
	waiting, due := q.waiting, q.due
	q.waiting, q.due = nil, nil
	q.mu.Unlock()
	now := q.now()
	for r := range waiting {
		r.timer.Stop()
		_ = nakNow(r, r.due.Sub(now))
	}
	for _, r := range due {
		_ = nakNow(r, 0)
	}
}
