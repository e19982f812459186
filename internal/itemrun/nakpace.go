package itemrun

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The server redelivers a message after a delayed nak only when its
// consumer's pending timer fires, and every delayed nak resets that timer
// to 10 ms from now (nats-server's processNak). Under a steady stream of
// failures, naks come far more often than every 10 ms, the timer never
// fires, and retries that are due wait until the stream pauses: the
// window of a job's items (the coordinator's --job-queue) fills with
// retries waiting past their delay, and the job runs in bursts.
//
// So the agent sends its delayed naks together, on ticks of nakTick of the
// wall clock: every agent of the pool on the same grid, the consumer sees
// a burst of naks and then a gap of about nakTick, in which its timer
// fires and redelivers what is due. Each nak's delay is shortened by the
// time it waited for its tick, so a retry is due when its backoff says (it
// is redelivered at most one tick and the server's 10 ms later). Agents
// whose clocks differ by up to nakTick - 10 ms still leave such a gap.
// The message waits without a slot, its state already written: a crash
// meanwhile leaves it to AckWait, as a lost nak would.

// nakTick spaces the agent's bursts of delayed naks.
const nakTick = 20 * time.Millisecond

// pacedNak is a delayed nak waiting for its tick: msg is due again at due.
type pacedNak struct {
	msg jetstream.Msg
	due time.Time
}

// nakPacer holds delayed naks until the next tick. It is safe for
// concurrent use.
type nakPacer struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time // time.After; a test's gate

	mu     sync.Mutex
	queue  []pacedNak
	closed bool
	wake   chan struct{} // capacity 1: the queue became non-empty, or close
	done   chan struct{} // closed when run has sent everything and returned
}

func newNakPacer() *nakPacer {
	return &nakPacer{now: time.Now, after: time.After, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// nak sends msg's delayed nak (delay d from now) at the next tick, or at
// once once the pacer is closed.
func (p *nakPacer) nak(msg jetstream.Msg, d time.Duration) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		nakNow(msg, d)
		return
	}
	p.queue = append(p.queue, pacedNak{msg: msg, due: p.now().Add(d)})
	first := len(p.queue) == 1
	p.mu.Unlock()
	if first {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// run sends the queued naks on each tick until close; then it sends what
// is left at once and returns.
func (p *nakPacer) run() {
	defer close(p.done)
	for {
		<-p.wake
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			now := p.now()
			select {
			case <-p.after(now.Truncate(nakTick).Add(nakTick).Sub(now)):
			case <-p.wake: // closed meanwhile
			}
		}
		p.mu.Lock()
		q := p.queue
		p.queue = nil
		closed = p.closed
		p.mu.Unlock()
		now := p.now()
		for _, n := range q {
			nakNow(n.msg, n.due.Sub(now))
		}
		if closed {
			return
		}
	}
}

// close sends the naks still queued at once, and every later one as it
// comes, and waits until run has returned.
func (p *nakPacer) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.done
}

// nakNow naks msg with delay d, at least a millisecond: a zero delay would
// be a bare nak, an immediate redelivery (docs/jetstream.md §2).
func nakNow(msg jetstream.Msg, d time.Duration) error {
	return msg.NakWithDelay(max(d, time.Millisecond))
}
