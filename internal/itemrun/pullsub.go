package itemrun

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pullSub is the pull loop's subscription (pull.go): one wildcard inbox
// for the agent's life, request k sent with the reply subject inbox.k (the
// server's heartbeats and the request's end come on it; work messages keep
// their subject). Because every
// request is answered on it, a request the loop gives up on loses nothing:
// whatever the server still sends for it arrives here too. (nats.go's
// Fetch subscribes an inbox per request and unsubscribes it when it gives
// up, on a missed heartbeat or its context; the messages the server sent
// meanwhile were dropped and came back only after AckWait.) Its methods
// are for the pull loop's goroutine.
type pullSub struct {
	nc      *nats.Conn
	subject string // the consumer's CONSUMER.MSG.NEXT API subject
	inbox   string
	sub     *nats.Subscription
	in      chan *nats.Msg
	done    chan struct{} // closed when the loop has stopped reading in
	closed  chan struct{} // closed when the subscription has ended
	next    uint64
	once    sync.Once // close
}

// newPullSub subscribes the pull inbox for cons, whose JetStream API
// subjects start with api (apiPrefix).
func newPullSub(nc *nats.Conn, api string, cons jetstream.Consumer) (*pullSub, error) {
	info := cons.CachedInfo()
	p := &pullSub{
		nc:      nc,
		subject: api + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		inbox:   nc.NewInbox(),
		in:      make(chan *nats.Msg, 64),
		done:    make(chan struct{}),
		closed:  make(chan struct{}),
	}
	sub, err := nc.Subscribe(p.inbox+".*", func(m *nats.Msg) {
		select {
		case p.in <- m:
		case <-p.done:
			p.giveBack(m) // the loop stopped: back for another agent at once
		}
	})
	if err != nil {
		return nil, err
	}
	// No pending limit: nats.go would drop what goes over it, and a dropped
	// work message comes back only after AckWait.
	_ = sub.SetPendingLimits(-1, -1)
	sub.SetClosedHandler(func(string) { close(p.closed) })
	p.sub = sub
	return p, nil
}

// apiPrefix is the JetStream API prefix of js's requests ("$JS.API.").
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// request asks for n messages, for at most expiry, at now.
func (p *pullSub) request(n int, expiry time.Duration, now time.Time) (*pullRequest, error) {
	hb := min(pullHeartbeat, expiry/4)
	p.next++
	body := fmt.Appendf(nil, `{"batch":%d,"expires":%d,"idle_heartbeat":%d}`, n, expiry.Nanoseconds(), hb.Nanoseconds())
	if err := p.nc.PublishRequest(p.subject, p.inbox+"."+strconv.FormatUint(p.next, 10), body); err != nil {
		return nil, err
	}
	return &pullRequest{
		id: p.next, left: n, expires: now.Add(expiry), silence: max(2*hb, pullQuiet),
		heard: now, got: now,
	}, nil
}

// of is the number of the request a status message answers (0: none of
// ours). Work messages keep their own subject.
func (p *pullSub) of(m *nats.Msg) uint64 {
	tail, ok := strings.CutPrefix(m.Subject, p.inbox+".")
	if !ok {
		return 0
	}
	id, _ := strconv.ParseUint(tail, 10, 64)
	return id
}

// close ends the subscription without losing a message: the server is
// told to stop (Drain), and every work message still arriving, like every
// one in held, is given back (Nak) for another agent, at once. It waits
// for the drain at most pullGrace. Only the first call does anything.
func (p *pullSub) close(held []jetstream.Msg) {
	p.once.Do(func() {
		for _, m := range held {
			_ = m.Nak()
		}
		if err := p.sub.Drain(); err == nil {
			timeout := time.NewTimer(pullGrace)
			defer timeout.Stop()
		drain:
			for {
				select {
				case m := <-p.in:
					p.giveBack(m)
				case <-p.closed:
					break drain
				case <-timeout.C:
					break drain
				}
			}
		}
		close(p.done)
		_ = p.sub.Unsubscribe()
		for {
			select {
			case m := <-p.in:
				p.giveBack(m)
			default:
				return
			}
		}
	})
}

// giveBack naks m if it is a work message.
func (p *pullSub) giveBack(m *nats.Msg) {
	if !isStatus(m) {
		_ = newPulledMsg(p.nc, m).Nak()
	}
}

// isStatus says whether m is the server's word on a request (a heartbeat,
// its end, an error) rather than a work message.
func isStatus(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") != ""
}

// statusErr is what a status message says of its request: nil for a
// heartbeat or a request that ended as asked (its expiry, no messages, its
// batch), an error for the rest.
func statusErr(m *nats.Msg) error {
	code, descr := m.Header.Get("Status"), m.Header.Get("Description")
	lower := strings.ToLower(descr)
	switch {
	case code == "100", code == "404", code == "408":
		return nil
	case code == "503":
		return nats.ErrNoResponders
	case code == "409" && strings.Contains(lower, "consumer deleted"):
		return jetstream.ErrConsumerDeleted
	case code == "409" && strings.Contains(lower, "leadership change"):
		return jetstream.ErrConsumerLeadershipChanged
	case code == "409" && strings.Contains(lower, "batch completed"):
		return nil
	}
	return fmt.Errorf("%w: status %s %s", errPullRefused, code, descr)
}

// errPullRefused wraps a status the server ended a pull request with that
// is not one of those statusErr names.
var errPullRefused = errors.New("pull request refused")

// pullRequest is the pull request in flight, as the loop sees it. Times
// are explicit, so that its rules are tested without a clock.
type pullRequest struct {
	id      uint64
	left    int           // messages it may still deliver
	expires time.Time     // when the server ends it
	silence time.Duration // nothing heard for this long: it is lost
	heard   time.Time     // the server's last word on it (a message, a heartbeat)
	got     time.Time     // its last message (when sent, before the first)
	checked bool          // the quiet check is done
}

// delivered records one of its messages at now; it says whether the
// request is now complete.
func (r *pullRequest) delivered(now time.Time) bool {
	r.left--
	r.heard, r.got = now, now
	return r.left <= 0
}

// lost says why the request is given up at now ("" while it is not): the
// server has said nothing of it for its silence (two heartbeats, and at
// least pullQuiet), or has not ended it pullGrace after its expiry.
func (r *pullRequest) lost(now time.Time) string {
	switch {
	case now.Sub(r.expires) > pullGrace:
		return "the server did not end it"
	case now.Sub(r.heard) > r.silence:
		return "no heartbeat"
	}
	return ""
}

// quiet says whether the request has delivered nothing for pullQuiet and
// the consumer's state is not yet checked (pullStuck).
func (r *pullRequest) quiet(now time.Time) bool {
	return !r.checked && now.Sub(r.got) >= pullQuiet
}

// pullStuck says, from the consumer's state, whether a request that has
// delivered nothing for pullQuiet is to be replaced: the server holds no
// pull request at all (so not this one), or it has messages and room to
// deliver them (MaxAckPending) while this request got none.
func pullStuck(ci *jetstream.ConsumerInfo) bool {
	if ci.NumWaiting == 0 {
		return true
	}
	room := ci.Config.MaxAckPending <= 0 || ci.NumAckPending < ci.Config.MaxAckPending
	return ci.NumPending > 0 && room
}
