// Package jspub publishes batches of messages to JetStream streams and
// waits for their PubAcks, at less cost per message than nats.go's
// PublishMsgAsync: no future, channels or timer per message, and a PubAck
// that reports success is recognised without decoding its JSON.
//
// The coordinator publishes every work item through it. Under nats.go's
// async publisher, per-message futures, a timer each (for the PubAck
// timeout) and PubAck decoding by reflection were a quarter of the
// coordinator's CPU in the daemon benchmark (docs/benchmarks.md).
package jspub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultTimeout is how long Send waits for a batch's PubAcks after its
// last publish; those not in by then count as refused, to be sent again.
const DefaultTimeout = 10 * time.Second

// ErrTimeout reports a message whose PubAck did not come within the
// timeout (the connection dropped, the stream has no leader): whether it
// was stored is not known, so it is sent again under its Nats-Msg-Id.
var ErrTimeout = errors.New("jspub: no PubAck in time")

// Publisher sends batches on one connection, with the PubAcks of every
// batch arriving on one wildcard subscription. It is safe for concurrent
// use; concurrent batches are independent.
type Publisher struct {
	nc      *nats.Conn
	prefix  string // the inbox, with a trailing '.': replies are prefix + "<batch>.<index>"
	sub     *nats.Subscription
	timeout time.Duration
	after   func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	nextID  uint64
	batches map[uint64]*batch
}

// Option configures a Publisher.
type Option func(*Publisher)

// WithTimeout sets how long Send waits for PubAcks after a batch's last
// publish. Defaults to DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(p *Publisher) {
		if d > 0 {
			p.timeout = d
		}
	}
}

// withAfter replaces time.After, for tests.
func withAfter(after func(time.Duration) <-chan time.Time) Option {
	return func(p *Publisher) { p.after = after }
}

// New subscribes to a fresh inbox of nc for PubAcks. Close releases it.
func New(nc *nats.Conn, opts ...Option) (*Publisher, error) {
	p := &Publisher{nc: nc, prefix: nc.NewInbox() + ".", timeout: DefaultTimeout, after: time.After, batches: map[uint64]*batch{}}
	for _, o := range opts {
		o(p)
	}
	sub, err := nc.Subscribe(p.prefix+"*.*", p.onAck)
	if err != nil {
		return nil, fmt.Errorf("jspub: subscribing to PubAcks: %w", err)
	}
	// PubAcks are small and come at the publishing rate: never drop them
	// as a slow consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	p.sub = sub
	return p, nil
}

// Close unsubscribes. Batches still waiting end with ErrTimeout.
func (p *Publisher) Close() error { return p.sub.Unsubscribe() }

// batch is one Send's messages awaiting PubAcks.
type batch struct {
	mu   sync.Mutex
	errs []error
	got  []bool
	left int
	all  chan struct{} // closed when every PubAck is in
}

// Send publishes msgs (each needs a subject; Reply is overwritten) and
// waits for their PubAcks. It returns the messages the server did not
// store, in order, with the last reason one was refused; a duplicate
// (already stored under its Nats-Msg-Id) counts as stored. err is not nil
// only when ctx ended or a message cannot be published at all (over the
// server's max_payload: nats.ErrMaxPayload); then what was sent may or may
// not be stored.
func (p *Publisher) Send(ctx context.Context, msgs []*nats.Msg) (refused []*nats.Msg, lastRefusal error, err error) {
	if len(msgs) == 0 {
		return nil, nil, nil
	}
	b := &batch{errs: make([]error, len(msgs)), got: make([]bool, len(msgs)), left: len(msgs), all: make(chan struct{})}
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.batches[id] = b
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.batches, id)
		p.mu.Unlock()
	}()

	replies := replySubjects(p.prefix+strconv.FormatUint(id, 10)+".", len(msgs))
	for i, m := range msgs {
		m.Reply = replies[i]
		if err := p.nc.PublishMsg(m); err != nil {
			if errors.Is(err, nats.ErrMaxPayload) {
				return nil, nil, err
			}
			b.record(i, err) // not sent (the connection is closed or reconnecting with a full buffer)
		}
	}
	select {
	case <-b.all:
	case <-p.after(p.timeout):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, m := range msgs {
		err := b.errs[i]
		if !b.got[i] {
			err = ErrTimeout
		}
		if err != nil {
			refused = append(refused, m)
			lastRefusal = err
		}
	}
	return refused, lastRefusal, nil
}

// replySubjects returns prefix + "0" to prefix + "<n-1>", each a piece of
// one string: two allocations for a batch instead of two per message.
func replySubjects(prefix string, n int) []string {
	var sb strings.Builder
	sb.Grow(n * (len(prefix) + 5))
	ends := make([]int, n)
	var digits [20]byte
	for i := range n {
		sb.WriteString(prefix)
		sb.Write(strconv.AppendInt(digits[:0], int64(i), 10))
		ends[i] = sb.Len()
	}
	all := sb.String()
	out := make([]string, n)
	start := 0
	for i, end := range ends {
		out[i] = all[start:end]
		start = end
	}
	return out
}

// record takes message i's PubAck (or failure to send) once.
func (b *batch) record(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.got) || b.got[i] {
		return
	}
	b.got[i], b.errs[i] = true, err
	if b.left--; b.left == 0 {
		close(b.all)
	}
}

// onAck routes a PubAck to its batch by its subject, prefix<batch>.<index>.
func (p *Publisher) onAck(m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, p.prefix)
	dot := strings.IndexByte(rest, '.')
	if dot < 0 {
		return
	}
	id, err1 := strconv.ParseUint(rest[:dot], 10, 64)
	i, err2 := strconv.Atoi(rest[dot+1:])
	if err1 != nil || err2 != nil {
		return
	}
	p.mu.Lock()
	b := p.batches[id]
	p.mu.Unlock()
	if b != nil {
		b.record(i, ackError(m))
	}
}

// ackError is nil for a PubAck that says the message is stored, else why
// not.
func ackError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		// A status message instead of a PubAck: 503 is no stream for the
		// subject (no responders).
		if status := m.Header.Get("Status"); status == "503" {
			return nats.ErrNoResponders
		} else if status != "" {
			return fmt.Errorf("jspub: status %s %s", status, m.Header.Get("Description"))
		}
		return errors.New("jspub: empty PubAck")
	}
	// A PubAck is {"stream":…,"seq":…[,"duplicate":true]…}; a refusal has
	// an "error" member, which only a refusal has.
	if !bytes.Contains(m.Data, []byte(`"error"`)) {
		return nil
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("jspub: malformed PubAck %q: %w", m.Data, err)
	}
	if resp.Error == nil {
		return nil
	}
	return &RefusedError{Code: resp.Error.Code, ErrCode: resp.Error.ErrCode, Description: resp.Error.Description}
}

// RefusedError is the server's reason for not storing a message.
type RefusedError struct {
	Code        int // HTTP-like status, e.g. 503
	ErrCode     int // JetStream error code, e.g. 10077 (maximum messages exceeded)
	Description string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("jspub: refused: %s (status %d, err_code %d)", e.Description, e.Code, e.ErrCode)
}
