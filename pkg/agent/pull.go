package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// How an agent pulls. Messages buffered ahead of the workers cost nothing
// while items are short, and are what keeps the workers busy: a pull
// request takes a round trip, during which the buffer must last. But a
// buffered message's AckWait runs while it waits (docs/jetstream.md §9),
// so for long items the buffer must stay small. Unless Config.Prefetch
// fixes it, the buffer is sized by what the workers get through in
// prefetchWait: Concurrency × prefetchWait / (the average time an item
// takes), between Concurrency and MaxPrefetch. A buffered message then
// waits about prefetchWait for a worker, whatever the items take, except
// that the buffer never shrinks below Concurrency (one item's time).
//
// The pull loop asks for what the buffer lacks once it is half empty, in
// one pull request (Fetch), and hands the messages to the workers through
// a channel that is the buffer.
//
// The average is forgotten once no item has ended for prefetchStale: the
// next job's items may take far longer than the last one's, and an idle
// agent that still sized its buffer by no-op items would take a whole
// burst of a new job's long items for itself while the other agents wait.
// A pull request bigger than Concurrency ends after prefetchStale, so an
// agent that goes idle holds one for that long at most.

// prefetchWait is how long a buffered message should wait for a worker,
// at most; far below any sensible AckWait (30s by default).
const prefetchWait = 250 * time.Millisecond

// prefetchEWMA weighs the latest item's time in the running average: 1/8.
const prefetchEWMA = 8

// prefetchStale is how long after the last item ended the running average
// is forgotten (see above). Items under prefetchWait end far more often
// while the agent is busy; longer ones are sized at Concurrency anyway.
const prefetchStale = time.Second

// prefetch sizes the buffer of work messages (see above). It is safe for
// concurrent use.
type prefetch struct {
	min, max int
	workers  int
	wait     time.Duration
	now      func() time.Time // the system clock; tests set it

	mu   sync.Mutex
	avg  time.Duration // running average of an item's time; 0: none yet, or forgotten
	last time.Time     // when the last item ended
}

// newPrefetch returns the sizing for cfg: fixed at cfg.Prefetch when set,
// else adaptive between Concurrency and MaxPrefetch.
func newPrefetch(cfg Config) *prefetch {
	if cfg.Prefetch > 0 {
		return &prefetch{min: cfg.Prefetch, max: cfg.Prefetch, workers: cfg.Concurrency, wait: prefetchWait, now: time.Now}
	}
	return &prefetch{min: cfg.Concurrency, max: max(cfg.Concurrency, MaxPrefetch), workers: cfg.Concurrency, wait: prefetchWait, now: time.Now}
}

// observe records that an item took d (from a worker taking its message
// to the worker being free again).
func (p *prefetch) observe(d time.Duration) {
	if p.min == p.max {
		return
	}
	p.observeAt(d, p.now())
}

// observeAt is observe for an item that ended at now: the worker reads the
// clock once for both (a clock read is some 200ns on a VM, several per
// item).
func (p *prefetch) observeAt(d time.Duration, now time.Time) {
	if p.min == p.max {
		return
	}
	d = max(d, time.Microsecond)
	p.mu.Lock()
	if p.avg == 0 || now.Sub(p.last) > prefetchStale {
		p.avg = d
	} else {
		p.avg += (d - p.avg) / prefetchEWMA
	}
	p.last = now
	p.mu.Unlock()
}

// want is the buffer's size now.
func (p *prefetch) want() int {
	if p.min == p.max {
		return p.min
	}
	now := p.now()
	p.mu.Lock()
	avg := p.avg
	if now.Sub(p.last) > prefetchStale {
		avg = 0
	}
	p.mu.Unlock()
	if avg == 0 {
		return p.min // nothing known (yet, or any more): as safe as a fixed Concurrency
	}
	return AdaptivePrefetch(p.workers, avg)
}

// expiry is how long a pull request for n messages waits for them: a
// request bigger than the smallest buffer is sized by the items of the
// last second, and ends when that knowledge goes stale.
func (p *prefetch) expiry(n int) time.Duration {
	if n > p.min {
		return prefetchStale
	}
	return natsconn.PullExpiry
}

// AdaptivePrefetch is the buffer an agent of concurrency workers keeps
// (Config.Prefetch 0) when its items take itemTime on average: what the
// workers get through in 250ms, between concurrency and MaxPrefetch.
func AdaptivePrefetch(concurrency int, itemTime time.Duration) int {
	hi := max(concurrency, MaxPrefetch)
	if itemTime <= 0 {
		return hi
	}
	n := int64(concurrency) * int64(prefetchWait) / int64(itemTime)
	return int(min(max(n, int64(concurrency)), int64(hi)))
}

// request is how many messages to ask for when buffered are waiting, or 0
// while the buffer is more than half full.
func (p *prefetch) request(buffered int) int {
	want := p.want()
	n := want - buffered
	if n < max(1, (want+1)/2) {
		return 0
	}
	return n
}

// pullBackoff spaces pulls after a pull failed: 100ms doubling to 2s.
var pullBackoff = retry.Exponential(100*time.Millisecond, 2*time.Second)

// pull fills buf (a channel of capacity p.max at least, which the workers
// read) until ctx ends; taken says a worker took a message. It returns nil
// when ctx ends, an error when pulling cannot go on (the connection is
// closed for good, the consumer is gone).
func (a *Agent) pull(ctx context.Context, cons jetstream.Consumer, buf chan<- jetstream.Msg, taken <-chan struct{}) error {
	backoff := retry.NewBackoff(pullBackoff, nil, nil)
	for ctx.Err() == nil {
		n := a.prefetch.request(len(buf))
		if n == 0 {
			select {
			case <-taken:
			case <-ctx.Done():
			}
			continue
		}
		got, err := a.fetch(ctx, cons, n, buf)
		if got > 0 || errors.Is(err, jetstream.ErrNoMessages) {
			a.link.answered() // the server answered the pull
		}
		switch {
		case err == nil || errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded):
			backoff.Reset()
			a.cutOff.Observe(nil)
			continue
		case ctx.Err() != nil:
			return nil
		case a.nc.IsClosed():
			// The server closed the connection for good (nats.go does not
			// reconnect after a protocol error): say so, rather than end
			// as if stopped.
			return natsconn.Lost(a.nc)
		case errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("pull: %w", err)
		}
		if unreachable(err) {
			a.link.lost(err, "pull") // one line while it lasts, not one per try
		} else {
			a.log.Warn().Err(err).Msg("pull failed; pulling again")
		}
		if a.cutOff.ObserveConn(a.nc, err) {
			// A server cut off the cluster keeps its clients: leave it.
			a.log.Warn().Str("server", a.nc.ConnectedUrlRedacted()).Msg("pulls keep failing: the server seems cut off the cluster; reconnecting to another")
		}
		if backoff.Wait(ctx) != nil {
			return nil
		}
	}
	return nil
}

// fetch makes one pull request for n messages and hands them to the
// workers' buffer as they come. The request ends when n have come, after
// its expiry (prefetch.expiry), or at once when ctx ends: messages that arrived by then are
// given back at once.
func (a *Agent) fetch(ctx context.Context, cons jetstream.Consumer, n int, buf chan<- jetstream.Msg) (got int, err error) {
	expiry := a.prefetch.expiry(n)
	fctx, cancel := context.WithTimeout(ctx, expiry)
	defer cancel()
	// The server sends heartbeats only while it has nothing to deliver; the
	// request's expiry must be at least twice the heartbeat.
	hb := min(natsconn.PullHeartbeat, expiry/4)
	batch, err := cons.Fetch(n, jetstream.FetchContext(fctx), jetstream.FetchHeartbeat(hb))
	if err != nil {
		return 0, err
	}
	for m := range batch.Messages() {
		got++
		if ctx.Err() != nil {
			_ = m.Nak()
			continue
		}
		buf <- m // never blocks: the pull asked for at most the room left
	}
	return got, batch.Error()
}
