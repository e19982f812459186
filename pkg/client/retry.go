package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ReadAttempt bounds the first attempt of a read request (Status): a
// coordinator that has not answered by then (paused, or behind a server
// cut off the cluster, both of which keep their queue subscription) is
// passed over, and the request is sent again, to every coordinator
// (messages.Names.APIAllSubject). The answer to any attempt is taken, so a
// coordinator that is only slow still answers; later attempts wait
// ReadAttempt, then twice as long each time. Reads are idempotent.
const ReadAttempt = 750 * time.Millisecond

// SubmitAttempt bounds the first attempt of a submission before it is
// sent again (to the queue group: one coordinator takes it). A submission
// sent twice is one job: Submit gives a spec without an id one of its own
// first, and a coordinator answers an id it already has with the job.
const SubmitAttempt = 5 * time.Second

// FailoverAfter: with WithFailover, a request not answered for this long
// (or answered "no coordinator") moves the connection to another server
// before it is sent again.
const FailoverAfter = 1500 * time.Millisecond

// failoverQuiet is how long after a move a client makes no other: the new
// server needs time to answer, and requests made at the same time must
// not move the connection once each.
const failoverQuiet = 3 * time.Second

// NoCoordinatorWait is how long a request (every Client call) that finds no
// coordinator serving keeps being sent again before it returns
// ErrNoCoordinator, within its context. A cluster whose nodes all started
// again (after a power cut, or all killed at once) takes clients before
// its routes have formed: a coordinator's subscriptions do not reach the
// other nodes for some seconds, and requests through them find no one.
// The same happens for a moment while one coordinator stops serving and
// another takes over.
const NoCoordinatorWait = 5 * time.Second

// idleRetry is the first pause before a request that found no coordinator
// serving (or one answered "unavailable") is sent again; the pause doubles
// up to idleRetryMax while no coordinator is found.
const (
	idleRetry    = 100 * time.Millisecond
	idleRetryMax = 500 * time.Millisecond
)

// WithFailover lets the client move its connection to another server of
// its URL list (nats.Conn.ForceReconnect) when a request through the
// server it is on finds no coordinator, or gets no answer for
// FailoverAfter: what a server cut off the cluster does to every request
// while keeping its clients connected. The request then goes on through
// the new server. Use it when the client owns its connection (fleetctl
// does): a move drops what is in flight on the connection's other
// subscriptions. At most one move every 3 s.
func WithFailover() Option {
	return func(c *Client) { c.failover = true }
}

// asking is how a request is repeated.
type asking struct {
	first time.Duration // the first attempt's wait; the second's too, then doubling
	all   bool          // attempts after the first go to every coordinator
	// once: the request is sent again only while no coordinator serves
	// the endpoint (no responders: no one got it, so a change is not made
	// twice); any answer ends it, "unavailable" included. Call asks so,
	// with first neverResend.
	once bool
}

// neverResend is the wait of a request that is not sent again for want of
// an answer: its context ends first.
const neverResend = time.Duration(math.MaxInt64)

// ask sends data to endpoint until an answer comes back (the first answer
// to any attempt), or an API error other than "unavailable", or no
// coordinator has been serving for NoCoordinatorWait (every attempt since
// found none), or ctx ends. An attempt unanswered for its wait is sent
// again; with WithFailover the connection may move first (moveServer).
//
// ask returns by ctx's end even while the connection is blocked: nats.go
// holds the connection's lock while it dials a server to reconnect to (up
// to its Timeout for each, 2 s by default), and every publish or
// subscribe waits for it. All the servers killed at once did that to a
// status request for 6.5 s, its timeout 3 s. The attempts then go on
// alone until the lock is free, and end at once.
func (c *Client) ask(ctx context.Context, endpoint string, data []byte, how asking) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	type answer struct {
		msg *nats.Msg
		err error
	}
	done := make(chan answer, 1)
	var last lastError
	go func() {
		msg, err := c.attempts(ctx, endpoint, data, how, &last)
		done <- answer{msg, err}
	}()
	select {
	case a := <-done:
		return a.msg, a.err
	case <-ctx.Done():
		if err := last.get(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("client: %s: %w", endpoint, ctx.Err())
	}
}

// lastError is what the last attempt got, when it got something: shared
// by ask and its attempts. Safe for concurrent use.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (l *lastError) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// attempts is ask's loop, on a goroutine of its own; last follows lastErr.
func (c *Client) attempts(ctx context.Context, endpoint string, data []byte, how asking, last *lastError) (*nats.Msg, error) {
	inbox := c.nc.NewInbox()
	answers := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox+".*", answers)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", endpoint, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A closed connection answers nothing: fail at once (fleetctl closes
	// it when the server refuses the request for want of permission).
	closed := c.nc.StatusChanged(nats.CLOSED)
	defer c.nc.RemoveStatusListener(closed)
	if c.nc.IsClosed() {
		return nil, fmt.Errorf("client: %s: %w", endpoint, nats.ErrConnectionClosed)
	}

	start := time.Now()
	wait := how.first
	var lastErr error       // what the last attempt got, when it got something
	var idleSince time.Time // the first of the "no coordinator" answers in a row
	pause := idleRetry      // before an attempt that follows such an answer
	all := false            // this attempt goes to every coordinator
	for n := 0; ; n++ {
		subject := c.names.APISubject(endpoint)
		switch {
		case c.team != "":
			subject = c.names.TeamAPISubject(c.team, endpoint) // no "all" subject for teams
		case all:
			subject = c.names.APIAllSubject(endpoint)
		}
		m := nats.NewMsg(subject)
		m.Reply = fmt.Sprintf("%s.%d", inbox, n)
		m.Data = data
		m.Header.Set(messages.HeaderSchema, schemaHeader)
		tracing.Inject(ctx, m.Header)
		if err := c.nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("client: %s: %w", endpoint, err)
		}
		next := time.NewTimer(wait)
		resend := false
		for !resend {
			select {
			case <-ctx.Done():
				next.Stop()
				if lastErr != nil {
					return nil, lastErr
				}
				return nil, fmt.Errorf("client: %s: %w", endpoint, ctx.Err())
			case <-closed:
				next.Stop()
				return nil, fmt.Errorf("client: %s: %w", endpoint, nats.ErrConnectionClosed)
			case <-next.C:
				// Unanswered: send again, to every coordinator.
				c.moveServer(time.Since(start))
				all, wait, resend = how.all, min(2*wait, time.Minute), true
				if n == 0 {
					wait = how.first
				}
			case msg := <-answers:
				noResponders := len(msg.Data) == 0 && msg.Header.Get("Status") == "503"
				var ae *messages.APIError
				unavailable := !noResponders && errors.As(decodeReply(endpoint, msg, nil), &ae) &&
					(ae.Code == messages.CodeUnavailable || stoppedAnswer(ae))
				switch {
				case unavailable && how.once:
					next.Stop()
					return msg, nil // an answer: the caller decodes its error
				case noResponders && msg.Subject != m.Reply:
					// An earlier attempt's: the last one may still be answered.
				case noResponders && all:
					// Coordinators that do not serve the subject of all
					// (older ones), or none serving: the queue group next.
					all, resend = false, true
				case noResponders || unavailable:
					// None serves now (one stopped serving while it cannot
					// reach the cluster, another takes over), or this one is
					// busy: a moment before the next attempt.
					if noResponders {
						lastErr = errNoCoordinator
						last.set(lastErr)
						if idleSince.IsZero() {
							idleSince = time.Now()
						} else if time.Since(idleSince) >= NoCoordinatorWait {
							next.Stop()
							return nil, lastErr
						}
						// Through another server the coordinators may be
						// there (this one is cut off, or its routes are
						// not up yet).
						c.moveServer(FailoverAfter)
					} else {
						lastErr = ae
						last.set(lastErr)
						idleSince, pause = time.Time{}, idleRetry
						// "Unavailable" again and again: this server may
						// be cut off, its coordinators with it.
						c.moveServer(time.Since(start))
					}
					next.Stop()
					paused := time.NewTimer(pause)
					select {
					case <-ctx.Done():
						paused.Stop()
						return nil, lastErr
					case <-paused.C:
					}
					if noResponders {
						pause = min(2*pause, idleRetryMax)
					}
					resend = true
				default:
					next.Stop()
					return msg, nil
				}
			}
		}
	}
}

// moveServer moves the connection to another server of its URL list when
// the client may (WithFailover), the request has gone unanswered for at
// least FailoverAfter (waited), the connection knows another server, and
// it has not moved in the last failoverQuiet.
func (c *Client) moveServer(waited time.Duration) {
	if !c.failover || waited < FailoverAfter || len(c.nc.Servers()) < 2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.moved.IsZero() && time.Since(c.moved) < failoverQuiet {
		return
	}
	if c.nc.ForceReconnect() == nil {
		c.moved = time.Now()
	}
}

// readCall is call for a read: ask with ReadAttempt, later attempts to
// every coordinator.
func readCall[R any](ctx context.Context, c *Client, endpoint string, req any) (*R, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := c.ask(ctx, endpoint, data, asking{first: ReadAttempt, all: true})
	if err != nil {
		return nil, err
	}
	var r R
	if err := decodeReply(endpoint, msg, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// submit sends a spec with an id (its own, or one given here) until a
// coordinator answers.
func (c *Client) submit(ctx context.Context, specJSON []byte) (*messages.SubmitReply, error) {
	data, err := withJobID(specJSON)
	if err != nil {
		return nil, err
	}
	msg, err := c.ask(ctx, messages.EndpointJobsSubmit, data, asking{first: SubmitAttempt})
	if err != nil {
		return nil, err
	}
	var r messages.SubmitReply
	if err := decodeReply(messages.EndpointJobsSubmit, msg, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// withJobID returns specJSON with an "id" when it has none (named as a
// coordinator would name it: job-<nuid>), so that a submission sent again
// is the same job. A spec that is not a JSON object is returned as is: the
// coordinator says what is wrong with it.
func withJobID(specJSON []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(specJSON, &fields) != nil || fields == nil {
		return specJSON, nil
	}
	given, has := fields["id"]
	if has && string(given) != `""` && string(given) != "null" {
		return specJSON, nil
	}
	id, err := json.Marshal("job-" + strings.ToLower(nuid.Next()))
	if err != nil {
		return nil, err
	}
	if has { // "id": "" or null: replaced
		fields["id"] = id
		return json.Marshal(fields)
	}
	// The id goes in first, the spec's own bytes after it unchanged.
	rest := bytes.TrimLeft(specJSON, " \t\r\n")[1:] // after the '{'
	out := append([]byte(`{"id":`), id...)
	if len(bytes.TrimSpace(rest)) > 0 && bytes.TrimSpace(rest)[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

// stoppedAnswer reports an answer of a coordinator of v0.3.0 that stopped,
// or whose leadership term ended, while it served the request: its own
// context cancelled, it answered "internal: context canceled", where later
// releases answer "unavailable" (internal/jobrun's unavailableOr). The
// request never carries the client's context, so such an answer is never
// about the client's; another coordinator may answer it, as during a
// rolling upgrade (docs/deploy.md, "Upgrades").
func stoppedAnswer(ae *messages.APIError) bool {
	return ae.Code == messages.CodeInternal && strings.HasSuffix(ae.Message, context.Canceled.Error())
}
