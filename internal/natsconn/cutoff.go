package natsconn

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of CutOff.
const (
	// DefaultCutOffFailures failed JetStream calls in a row, the first at
	// least DefaultCutOffSpan before the last, mean the server has lost
	// the cluster.
	DefaultCutOffFailures = 3
	DefaultCutOffSpan     = 2 * time.Second
	// DefaultCutOffQuiet is how long after a forced reconnect no other is
	// forced: the new server needs time to answer.
	DefaultCutOffQuiet = 30 * time.Second
)

// CutOff notices that the server a connection is on has lost the cluster.
// Such a server keeps its client connections (nats.go sees nothing wrong),
// but every JetStream request through it fails: no responders, "no
// response from stream", timeouts. The other servers keep their dead route
// to it for 10–75 s. Fed the outcome of the calls a component makes
// anyway (a lease renewal, a health check, a pull), CutOff says when to
// move the connection to another server of its URL list
// (nats.Conn.ForceReconnect). It decides only; Observe never blocks.
// Safe for concurrent use.
type CutOff struct {
	// Failures and Span: Failures failed calls in a row, over at least
	// Span. Default to DefaultCutOffFailures and DefaultCutOffSpan.
	Failures int
	Span     time.Duration
	// Quiet is how long after a reconnect no other is asked for. Defaults
	// to DefaultCutOffQuiet.
	Quiet time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	mu     sync.Mutex
	run    int       // failures in a row
	first  time.Time // of the run
	conn   uint64    // the connection's reconnects when the run began (ObserveConn)
	forced time.Time // the last reconnect asked for
}

// ClusterLoss reports whether err is what a call through a server cut off
// the cluster gets: no responders, no response from the stream, a timeout,
// or a JetStream that is not (or no longer) available there.
func ClusterLoss(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrJetStreamNotEnabled):
		return true
	case StoreFull(err):
		return false // the cluster answered: it has no room
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 // "JetStream system temporarily unavailable"
	}
	return false
}

// StoreFull reports whether err is JetStream refusing a write for want of
// room: the server's max_file_store or max_memory_store reached
// ("insufficient resources", "insufficient storage resources available"),
// or the account's JetStream limits. A stream's own limits (max_bytes with
// DiscardNew) are not this: they are the work stream's backpressure.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageExceeded, errCodeMemoryExceeded, errCodeAccountResourcesExceeded:
		return true
	}
	return false
}

// JetStream's error codes of a store with no room (nats-server errors.json).
const (
	errCodeAccountResourcesExceeded = 10002 // resource limits exceeded for account
	errCodeInsufficientResources    = 10023 // insufficient resources
	errCodeMemoryExceeded           = 10028 // insufficient memory resources available
	errCodeStorageExceeded          = 10047 // insufficient storage resources available
)

// Observe records the outcome of one JetStream call and reports whether
// the connection should now move to another server. A success, or an
// error that says nothing of the cluster (a conflict, a missing key), ends
// a run of failures.
func (c *CutOff) Observe(err error) bool { return c.observe(err, true, nil) }

// observe is Observe; with canMove false it counts the run but never says
// to move. conn, when not nil, is the number of times the connection has
// reconnected: a run counted on an earlier server starts again.
func (c *CutOff) observe(err error, canMove bool, conn *uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ClusterLoss(err) {
		c.run = 0
		return false
	}
	if conn != nil && *conn != c.conn {
		c.conn, c.run = *conn, 0
	}
	now := c.now()
	if c.run == 0 {
		c.first = now
	}
	c.run++
	if !canMove || c.run < c.failures() || now.Sub(c.first) < c.span() {
		return false
	}
	if !c.forced.IsZero() && now.Sub(c.forced) < c.quiet() {
		return false
	}
	c.forced, c.run = now, 0
	return true
}

// ObserveConn is Observe that also moves nc to another server when it is
// time to, and reports whether it did. A connection that knows a single
// server (one URL, none discovered) never moves: a reconnect would land on
// the same server and only drop what is in flight on the connection (a
// loaded single-node deployment whose calls time out is not cut off).
//
// Only failures on the server nc is on now count: one while nc has no
// server (it is reconnecting: every node was killed, say) says nothing of
// a server, and once nc has reconnected the run starts again. After a
// whole cluster restarts, its JetStream takes seconds to elect its
// leaders; calls that failed while the nodes were down would otherwise
// move a connection that had just found a server, dropping the answers
// in flight on it (a coordinator's API replies, refused by the new
// server) and spending Quiet on a move that could not help.
func (c *CutOff) ObserveConn(nc *nats.Conn, err error) bool {
	if ClusterLoss(err) && !nc.IsConnected() {
		return false
	}
	conn := nc.Stats().Reconnects
	if !c.observe(err, len(nc.Servers()) > 1, &conn) {
		return false
	}
	return nc.ForceReconnect() == nil
}

func (c *CutOff) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *CutOff) failures() int {
	if c.Failures > 0 {
		return c.Failures
	}
	return DefaultCutOffFailures
}

func (c *CutOff) span() time.Duration {
	if c.Span > 0 {
		return c.Span
	}
	return DefaultCutOffSpan
}

func (c *CutOff) quiet() time.Duration {
	if c.Quiet > 0 {
		return c.Quiet
	}
	return DefaultCutOffQuiet
}
