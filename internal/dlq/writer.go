package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrFull is wrapped when the DLQ refuses an entry because the pool's
// dead-letter stream is at its quota (or the DLQ stream at its limits); the
// caller keeps the item (NakWithDelay) and tries later.
var ErrFull = errors.New("dlq: stream full")

// publisher is the part of jetstream.JetStream the writer needs.
type publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Writer publishes dead-letter entries. Safe for concurrent use.
type Writer struct {
	js     publisher
	names  messages.Names
	origin string
	// maxPayload is the server's max_payload: of the connection when js has
	// one, else DefaultMaxPayload.
	maxPayload func() int

	// Denials (nil: none) hears the server refuse the pool's dead-letter
	// subject, which role keys of the previous release do not name: the
	// entry then goes to the DLQ stream's subject at once, not after the
	// publish's timeout.
	Denials *natsconn.Denials
}

// DefaultMaxPayload is the server's default max_payload (1 MiB), the limit
// a Writer assumes when its publisher has no connection to ask.
const DefaultMaxPayload = 1 << 20

// headerRoom is kept for an entry's headers (their values are bounded: a
// job id, an encoded item id, a correlation id, a reason, the msg id).
const headerRoom = 1024

// NewWriter returns a writer publishing under names on origin's subjects:
// an agent's pool (fleet.dlqin.<pool>.<job>, its pool's dead-letter stream,
// within the pool's quota: wire.PoolDLQStream), or
// messages.CoordinatorOrigin for the DLQ mover (fleet.dlq._coordinator.<job>). Entries are encoded to fit
// the server's max_payload (wire.EncodeDLQEntry): the oldest attempts
// are left out first, so an entry can always be stored.
func NewWriter(js publisher, names messages.Names, origin string) *Writer {
	w := &Writer{js: js, names: names, origin: origin, maxPayload: func() int { return DefaultMaxPayload }}
	if c, ok := js.(interface{ Conn() *nats.Conn }); ok && c.Conn() != nil {
		w.maxPayload = func() int {
			if n := int(c.Conn().MaxPayload()); n > 0 {
				return n
			}
			return DefaultMaxPayload
		}
	}
	return w
}

// EntryMsgID is the de-duplication id of an item's entry for a generation.
func EntryMsgID(job, itemID string, generation int) string {
	return "dlq/" + wire.WorkMsgID(job, itemID, generation)
}

// Write publishes e and waits for the stream's acknowledgement. A nil error
// means the entry is stored (or was already, as a duplicate).
func (w *Writer) Write(ctx context.Context, e *messages.DLQEntry) error {
	if err := messages.ValidToken(e.JobID); err != nil {
		return fmt.Errorf("dlq: entry's job_id: %w", err)
	}
	data, err := wire.EncodeDLQEntry(e, w.maxPayload()-headerRoom)
	if err != nil {
		return fmt.Errorf("dlq: encode entry: %w", err)
	}
	subject := w.names.DLQSubject(w.origin, e.JobID)
	if w.origin != messages.CoordinatorOrigin {
		subject = wire.PoolDLQSubject(w.names, w.origin, e.JobID)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(messages.HeaderJobID, e.JobID)
	m.Header.Set(messages.HeaderItemID, messages.EncodeItemID(e.ItemID))
	if len(e.CorrelationID) <= 256 {
		m.Header.Set(messages.HeaderCorrelationID, e.CorrelationID)
	}
	m.Header.Set(messages.HeaderReason, e.Reason)
	pctx, stop := ctx, func() {}
	if w.Denials != nil && m.Subject != w.names.DLQSubject(w.origin, e.JobID) {
		pctx, stop = w.Denials.Watch(ctx, m.Subject)
	}
	_, err = w.js.PublishMsg(pctx, m, jetstream.WithMsgID(EntryMsgID(e.JobID, e.ItemID, e.Generation)))
	denied := errors.Is(context.Cause(pctx), natsconn.ErrDenied)
	stop()
	if (denied || errors.Is(err, jetstream.ErrNoStreamResponse)) && m.Subject != w.names.DLQSubject(w.origin, e.JobID) {
		// No dead-letter stream for the pool yet (a coordinator of an
		// earlier version), or role keys of the previous release, which
		// name none (kept until the roll's end: docs/deploy.md,
		// "Upgrades"); a refused publish stored nothing. The DLQ stream
		// itself, where a fleet secured by this release's fleetctl auth
		// init refuses it.
		m.Subject = w.names.DLQSubject(w.origin, e.JobID)
		_, err = w.js.PublishMsg(ctx, m, jetstream.WithMsgID(EntryMsgID(e.JobID, e.ItemID, e.Generation)))
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && isLimitCode(apiErr.ErrorCode) {
			return fmt.Errorf("%w: %v", ErrFull, err)
		}
		return fmt.Errorf("dlq: publish entry: %w", err)
	}
	return nil
}

// isLimitCode reports JetStream's "stream full" refusals.
func isLimitCode(code jetstream.ErrorCode) bool {
	switch code {
	case 10077, // store failed: "maximum messages/bytes exceeded" under DiscardNew
		10047: // insufficient resources
		return true
	}
	return false
}
