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
// any retry, the budget is claimed and the item's state written first;
// then the delivery waits in the agent, holding no slot, until its delay
// is up, and goes into the agent's buffer behind the messages already
// there. The server is spared the nak, the redelivery and, when the
// redelivery would reach another agent, the state read: the retry costs
// it one stored message, the state write.
//
// A local retry is not a delivery: MaxDeliver does not count it, attempts
// and the budgets do. At most MaxLocalRetries follow each other; the next
// retry is a delayed nak, which any agent of the pool may take, so that
// failures that are this agent's own (a full disk, a missing tool) reach
// another. If the agent dies while a local retry waits, AckWait brings
// the message to another agent, which reads the state written before it.
// At shutdown a waiting local retry is naked with the delay it has left.

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
		_ = nakNow(r.Msg, r.due.Sub(now))
	}
	for _, r := range due {
		_ = nakNow(r.Msg, 0)
	}
}
