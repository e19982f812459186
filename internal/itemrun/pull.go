package itemrun

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
// one pull request (see pull), and hands the messages to the workers through
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

// pullBackoff spaces pull requests after one failed: 100ms doubling to 2s.
var pullBackoff = retry.Exponential(100*time.Millisecond, 2*time.Second)

// How the pull loop keeps from waiting on a request that cannot deliver
// (pullRequest.lost, pullRequest.quiet).
const (
	// pullHeartbeat is the most a request's heartbeats are apart (a
	// quarter of its expiry when that is less).
	pullHeartbeat = time.Second
	// pullQuiet is how long a request may deliver nothing before the
	// consumer's state is checked (pullStuck), and the least silence
	// after which it is given up.
	pullQuiet = time.Second
	// pullGrace is how long after its expiry a request the server has not
	// ended is given up, and how long stopping waits for the server to
	// stop delivering.
	pullGrace = time.Second
	// pullTick is how often the loop looks at the request in flight.
	pullTick = 100 * time.Millisecond
)

// pull fills buf (a channel of capacity p.max at least, which the workers
// read) until ctx ends; taken says a worker took a message. It returns nil
// when ctx ends, an error when pulling cannot go on (the connection is
// closed for good, the consumer is gone).
//
// One pull request is in flight at a time, on the agent's pull
// subscription (pullSub). A request ends when it has delivered its batch,
// when the server ends it (its expiry), or when the loop gives it up: no
// heartbeat for two heartbeats, no end pullGrace after its expiry, or,
// once it has delivered nothing for pullQuiet, a consumer that has messages
// for it or holds no request at all (pullStuck). Then the loop pulls again
// at once. Giving up loses nothing: messages the server still sends for a
// request given up arrive on the same subscription, and are held until the
// buffer has room.
func (a *Agent) pull(ctx context.Context, cons jetstream.Consumer, buf chan<- jetstream.Msg, taken <-chan struct{}) error {
	ps, err := newPullSub(a.nc, apiPrefix(a.js.Options()), cons)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	var held []jetstream.Msg // arrived while buf was full
	defer func() { ps.close(held) }()
	backoff := retry.NewBackoff(pullBackoff, nil, nil)
	var (
		cur     *pullRequest
		retryAt time.Time // no request before, after a failure
	)
	failed := func(now time.Time, err error) {
		if unreachable(err) {
			a.link.lost(err, "pull") // one line while it lasts, not one per try
		} else {
			a.log.Warn().Err(err).Msg("pull failed; pulling again")
		}
		if a.cutOff.ObserveConn(a.nc, err) {
			// A server cut off the cluster keeps its clients: leave it.
			a.log.Warn().Str("server", a.nc.ConnectedUrlRedacted()).Msg("pulls keep failing: the server seems cut off the cluster; reconnecting to another")
		}
		retryAt = now.Add(backoff.Next())
	}
	ended := func() {
		cur = nil
		a.link.answered() // the server answered the pull
		backoff.Reset()
		a.cutOff.Observe(nil)
	}
	tick := time.NewTicker(pullTick)
	defer tick.Stop()
	for {
		if cur == nil {
			if now := time.Now(); !now.Before(retryAt) {
				if n := a.prefetch.request(len(buf) + len(held)); n > 0 {
					if cur, err = ps.request(n, a.prefetch.expiry(n), now); err != nil {
						if a.nc.IsClosed() {
							// The server closed the connection for good
							// (nats.go does not reconnect after a protocol
							// error): say so, rather than end as if stopped.
							return natsconn.Lost(a.nc)
						}
						failed(now, err)
					}
				}
			}
		}
		var (
			out   chan<- jetstream.Msg
			first jetstream.Msg
		)
		if len(held) > 0 {
			out, first = buf, held[0]
		}
		select {
		case <-ctx.Done():
			return nil
		case out <- first:
			held[0] = nil
			held = held[1:]
		case <-taken:
		case <-a.localRetries.ready():
			for _, r := range a.localRetries.take() {
				held = append(held, r) // on to buf behind what is held already
			}
		case m := <-ps.in:
			if !isStatus(m) {
				// A work message says nothing of the request it answers (its
				// subject is the work subject): count it against the one in
				// flight. One from a request given up ends the request in
				// flight early, which costs a request, and no message.
				if cur != nil && cur.delivered(time.Now()) {
					ended()
				}
				jm := newPulledMsg(a.nc, m)
				if len(held) > 0 {
					held = append(held, jm)
					break
				}
				select {
				case buf <- jm:
				default:
					held = append(held, jm)
				}
				break
			}
			err := statusErr(m)
			if errors.Is(err, jetstream.ErrConsumerDeleted) {
				return fmt.Errorf("pull: %w", err)
			}
			switch {
			case cur == nil || ps.of(m) != cur.id: // a request given up
			case m.Header.Get("Status") == "100":
				cur.heard = time.Now()
			case err == nil || errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
				ended()
			default:
				cur = nil
				failed(time.Now(), err)
			}
		case now := <-tick.C:
			if cur == nil {
				break
			}
			if why := cur.lost(now); why != "" {
				a.log.Info().Str("reason", why).Int("left", cur.left).Msg("pull request given up; pulling again")
				cur = nil
				break
			}
			if cur.quiet(now) {
				cur.checked = true
				if ci, err := a.consumerState(ctx, cons); err == nil && pullStuck(ci) {
					a.log.Info().Uint64("num_pending", ci.NumPending).Int("num_waiting", ci.NumWaiting).
						Msg("pull request delivers nothing while the consumer has work; pulling again")
					cur = nil
				}
			}
		}
	}
}

// consumerState asks the server for cons's state, waiting at most
// pullQuiet.
func (a *Agent) consumerState(ctx context.Context, cons jetstream.Consumer) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, pullQuiet)
	defer cancel()
	return cons.Info(ctx)
}
