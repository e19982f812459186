package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// MoverConsumer is the durable consumer of the advisories stream.
const MoverConsumer = "dlq-mover"

// maxDeliveriesAdvisory is the body of a MAX_DELIVERIES advisory.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// Mover dead-letters work messages that exhausted their consumer's
// MaxDeliver without an outcome — an agent that crashed or hung on the
// last delivery. Such a message stays in the work stream (docs/jetstream.md §4):
// the mover reads it by sequence, writes a DLQ entry with reason
// max_deliveries and the history the item's state holds, publishes the
// item's result so its job's counts close, and deletes the message.
// Every step is idempotent, so an advisory handled twice is harmless.
// Run one per fleet (the coordinator does). Safe for concurrent use.
type Mover struct {
	js     jetstream.JetStream
	names  messages.Names
	writer *Writer
	items  jetstream.KeyValue
	log    zerolog.Logger
	now    func() time.Time
}

// NewMover returns a mover; items is the fleet_items bucket.
func NewMover(js jetstream.JetStream, names messages.Names, items jetstream.KeyValue, log zerolog.Logger) *Mover {
	return &Mover{js: js, names: names, writer: NewWriter(js, names, messages.CoordinatorOrigin), items: items,
		log: log.With().Str("component", "dlq_mover").Logger(), now: time.Now}
}

// Run handles advisories until ctx ends.
func (m *Mover) Run(ctx context.Context) error {
	cons, err := m.js.CreateOrUpdateConsumer(ctx, m.names.AdvisoriesStream(), jetstream.ConsumerConfig{
		Durable:     MoverConsumer,
		Description: "jetfleet DLQ mover: MAX_DELIVERIES advisories of the work stream",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     time.Minute,
	})
	if err != nil {
		return fmt.Errorf("dlq: mover consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(16))
	if err != nil {
		return fmt.Errorf("dlq: mover: %w", err)
	}
	defer context.AfterFunc(ctx, it.Stop)()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case m.js.Conn().IsClosed():
				return fmt.Errorf("dlq: mover: %w", nats.ErrConnectionClosed)
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return nil
			}
			m.log.Warn().Err(err).Msg("advisory pull failed")
			continue
		}
		m.handle(ctx, msg)
	}
}

// handle moves the message one advisory names. A panic (a bug some message
// found) is logged and the advisory terminated: the coordinator goes on,
// rather than die on the same advisory after every restart.
func (m *Mover) handle(ctx context.Context, msg jetstream.Msg) {
	defer func() {
		if p := recover(); p != nil {
			m.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Str("advisory", string(msg.Data())).
				Msg("moving to the DLQ panicked; advisory dropped, the work message stays in the work stream")
			_ = msg.Term()
		}
	}()
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(msg.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		m.log.Warn().Err(err).Msg("unreadable advisory dropped")
		_ = msg.Term()
		return
	}
	if err := m.Move(ctx, adv.StreamSeq, adv.Deliveries); err != nil {
		m.log.Warn().Err(err).Uint64("stream_seq", adv.StreamSeq).Msg("moving to the DLQ failed; retrying later")
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	_ = msg.Ack()
}

// Move dead-letters the work message at seq. A message already gone (an
// agent finished it after all, or an earlier Move) is not an error.
func (m *Mover) Move(ctx context.Context, seq, deliveries uint64) error {
	stream, err := m.js.Stream(ctx, m.names.WorkStream())
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	entry, res := m.entryFor(ctx, raw, deliveries)
	if err := m.writer.Write(ctx, entry); err != nil {
		return err
	}
	if res != nil {
		data, err := wire.EncodeResult(res, int(m.js.Conn().MaxPayload())-headerRoom)
		if err != nil {
			return fmt.Errorf("dlq: result of %s/%s: %w", res.JobID, wire.ShortID(res.ItemID), err)
		}
		if _, err := m.js.Publish(ctx, m.names.ResultSubject(messages.CoordinatorOrigin, res.JobID), data); err != nil {
			return fmt.Errorf("dlq: result of %s/%s: %w", res.JobID, res.ItemID, err)
		}
	}
	if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("dlq: delete work message %d: %w", seq, err)
	}
	m.log.Warn().Str("job_id", entry.JobID).Str("item_id", entry.ItemID).Uint64("stream_seq", seq).
		Uint64("num_delivered", deliveries).Msg("work message exhausted MaxDeliver; dead-lettered")
	return nil
}

// entryFor builds the DLQ entry (and, for a decodable item, its result).
func (m *Mover) entryFor(ctx context.Context, raw *jetstream.RawStreamMsg, deliveries uint64) (*messages.DLQEntry, *messages.Result) {
	now := m.now()
	msg := fmt.Sprintf("no outcome after %d deliveries (the agent crashed, hung, or was stopped on each)", deliveries)
	var wi wire.WorkItem
	// The subject names the job (a job id goes into KV keys and subjects);
	// the body is data.
	pool, job, ok := wire.ParseWork(m.names, raw.Subject)
	known := ok && messages.ValidToken(job) == nil
	if err := json.Unmarshal(raw.Data, &wi); err != nil || wi.ItemID == "" || !known || wi.JobID != job {
		if !known {
			job = "unknown"
		}
		payload, _ := json.Marshal(string(raw.Data))
		return &messages.DLQEntry{
			JobID: job, ItemID: fmt.Sprintf("seq-%d", raw.Sequence), Payload: payload, Subject: raw.Subject,
			StreamSeq: raw.Sequence, Reason: messages.ReasonPoison, Error: "undecodable work message; " + msg,
			ErrorClass: "error", Signature: retry.Signature("undecodable work message"), DeadLetteredAt: now,
		}, nil
	}
	entry := &messages.DLQEntry{
		JobID: wi.JobID, ItemID: wi.ItemID, Index: wi.Index, Group: wi.Group, Pool: pool,
		Payload: wi.Payload, CorrelationID: wi.CorrelationID, Subject: raw.Subject, StreamSeq: raw.Sequence,
		Generation: wi.Generation, Attempts: append([]messages.Attempt(nil), wi.History...), AttemptsDropped: wi.HistoryDropped,
		Reason: messages.ReasonMaxDeliveries, Error: msg, ErrorClass: "error", Signature: retry.Signature(msg),
		ReplayCount: wi.ReplayCount, DeadLetteredAt: now,
	}
	retries := 0
	if e, err := m.items.Get(ctx, wire.ItemKey(entry.Pool, wi.JobID, wi.ItemID)); err == nil {
		var st wire.ItemState
		if json.Unmarshal(e.Value(), &st) == nil && st.Generation == wi.Generation {
			entry.Attempts = append(entry.Attempts, st.History...)
			entry.AttemptsDropped += st.HistoryDropped
			retries = st.Retries
			if st.Error != "" {
				entry.Error = st.Error + "; then " + msg
			}
		}
	}
	return entry, &messages.Result{
		JobID: wi.JobID, ItemID: wi.ItemID, Index: wi.Index, Group: wi.Group,
		Outcome: messages.OutcomeDeadLettered, Generation: wi.Generation, Retries: retries,
		Reason: messages.ReasonMaxDeliveries, Error: entry.Error, ErrorClass: entry.ErrorClass,
		Signature: entry.Signature, Agent: "dlq-mover", FinishedAt: now,
	}
}
