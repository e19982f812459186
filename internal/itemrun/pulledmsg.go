package itemrun

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pulledMsg is a work message that arrived on the pull loop's own
// subscription (pull.go), as a jetstream.Msg: the acknowledgements are
// nats.go's jetstream ones (the same bodies on the message's reply subject,
// each sent once, InProgress as often as asked). It is safe for concurrent
// use.
type pulledMsg struct {
	msg  *nats.Msg
	nc   *nats.Conn
	ackd atomic.Bool
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func newPulledMsg(nc *nats.Conn, m *nats.Msg) *pulledMsg { return &pulledMsg{msg: m, nc: nc} }

// The acknowledgement bodies of the JetStream protocol.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

func (m *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNotJSMessage, err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (m *pulledMsg) Data() []byte         { return m.msg.Data }
func (m *pulledMsg) Headers() nats.Header { return m.msg.Header }
func (m *pulledMsg) Subject() string      { return m.msg.Subject }
func (m *pulledMsg) Reply() string        { return m.msg.Reply }
func (m *pulledMsg) Ack() error           { return m.reply(context.Background(), ackAck, false) }
func (m *pulledMsg) Nak() error           { return m.reply(context.Background(), ackNak, false) }
func (m *pulledMsg) InProgress() error    { return m.reply(context.Background(), ackProgress, false) }
func (m *pulledMsg) Term() error          { return m.reply(context.Background(), ackTerm, false) }
func (m *pulledMsg) DoubleAck(ctx context.Context) error {
	return m.reply(ctx, ackAck, true)
}

func (m *pulledMsg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	body := append(append([]byte(nil), ackNak...), ` {"delay": `+strconv.FormatInt(delay.Nanoseconds(), 10)+`}`...)
	return m.reply(context.Background(), body, false)
}

func (m *pulledMsg) TermWithReason(reason string) error {
	if reason == "" {
		return m.Term()
	}
	return m.reply(context.Background(), append(append([]byte(nil), ackTerm...), " "+reason...), false)
}

// reply sends body on the message's reply subject, once unless it is a
// progress report; with sync, it waits for the server's answer (or ctx;
// without a deadline, 5s).
func (m *pulledMsg) reply(ctx context.Context, body []byte, sync bool) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	progress := string(body) == string(ackProgress)
	if !progress && m.ackd.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		_, err = m.nc.RequestWithContext(ctx, m.msg.Reply, body)
	} else {
		err = m.nc.Publish(m.msg.Reply, body)
	}
	if err != nil {
		return err
	}
	if !progress {
		m.ackd.Store(true)
	}
	return nil
}
