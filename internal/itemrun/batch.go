package itemrun

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// How results leave an agent. A worker that finishes an item hands its
// encoded result to the batcher (report, process.go) and goes on to the
// next item. The batcher (batchLoop) gathers the results of each results
// subject (one job) and publishes them as one message when
// Config.ResultBatch of them are in, when one more would not fit the
// server's max_payload, or ResultLinger after the first, whichever comes
// first. The ack loop then waits for that message's PubAck and only then
// acks (or terms) the work messages it reports: an item is acknowledged
// only once its result is stored. An agent that dies with results
// batched or unacknowledged leaves their work messages to be redelivered
// after AckWait, and the coordinator counts each item once however often
// its result arrives.

// pendingResult is an encoded result and the work message it settles.
type pendingResult struct {
	subject string
	data    []byte
	ack     ackTarget
}

// ackTarget is what to do with a work message once its result is stored:
// ack it, or term it.
type ackTarget struct {
	msg  jetstream.Msg
	term bool
}

// pendingAck is a published results message and the work messages it
// settles once its PubAck arrives.
type pendingAck struct {
	fut     jetstream.PubAckFuture
	targets []ackTarget
}

// resultBatch is the results of one subject gathered for one message.
type resultBatch struct {
	subject string
	msg     wire.ResultBatch
	targets []ackTarget
	since   time.Time // when its first result came in
}

// resultBatches decides when results leave: it is the batcher's pure part,
// driven with explicit times so that tests need no clock. It is not safe
// for concurrent use.
type resultBatches struct {
	maxItems int
	maxBytes int
	linger   time.Duration
	open     map[string]*resultBatch
}

func newResultBatches(maxItems, maxBytes int, linger time.Duration) *resultBatches {
	return &resultBatches{maxItems: maxItems, maxBytes: maxBytes, linger: linger, open: map[string]*resultBatch{}}
}

// add takes r in at now and returns the batches that are ready to go: the
// subject's open batch if r would not fit in it, and the batch r joined if
// that is now full.
func (bs *resultBatches) add(r pendingResult, now time.Time) (ready []*resultBatch) {
	b := bs.open[r.subject]
	if b != nil && !b.msg.Fits(len(r.data), bs.maxBytes) {
		ready = append(ready, b)
		b = nil
	}
	if b == nil {
		b = &resultBatch{subject: r.subject, since: now}
		bs.open[r.subject] = b
	}
	b.msg.Add(r.data)
	b.targets = append(b.targets, r.ack)
	if b.msg.Len() >= bs.maxItems {
		ready = append(ready, b)
		delete(bs.open, r.subject)
	}
	return ready
}

// due returns the batches whose linger has passed at now, and when the
// next of the others falls due (zero: none open).
func (bs *resultBatches) due(now time.Time) (ready []*resultBatch, next time.Time) {
	for subj, b := range bs.open {
		at := b.since.Add(bs.linger)
		if !at.After(now) {
			ready = append(ready, b)
			delete(bs.open, subj)
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return ready, next
}

// all returns every open batch, leaving none.
func (bs *resultBatches) all() []*resultBatch {
	ready := make([]*resultBatch, 0, len(bs.open))
	for subj, b := range bs.open {
		ready = append(ready, b)
		delete(bs.open, subj)
	}
	return ready
}

// batchLoop publishes the results that come in on a.results in batches
// (see above), handing each published message to the ack loop on a.acks.
// It returns once a.results is closed and drained, closing a.acks. The
// linger is timed on the system clock, not the configured clock: it is transport,
// and a test's manual clock must not hold results back.
func (a *Agent) batchLoop() {
	now := time.Now
	defer close(a.acks)
	bs := newResultBatches(a.cfg.ResultBatch, a.maxPayload(), a.cfg.ResultLinger)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := time.Time{} // when the timer fires; zero: stopped
	for {
		select {
		case r, ok := <-a.results:
			if !ok {
				for _, b := range bs.all() {
					a.publishBatch(b)
				}
				return
			}
			for _, b := range bs.add(r, now()) {
				a.publishBatch(b)
			}
		case <-timer.C:
			armed = time.Time{}
		}
		ready, next := bs.due(now())
		for _, b := range ready {
			a.publishBatch(b)
		}
		if !next.IsZero() && (armed.IsZero() || next.Before(armed)) {
			timer.Stop()
			timer.Reset(next.Sub(now()))
			armed = next
		}
	}
}

// publishBatch publishes b asynchronously for the ack loop; if the publish
// cannot even start, b's items are handed back to be redelivered.
func (a *Agent) publishBatch(b *resultBatch) {
	msg := nats.NewMsg(b.subject)
	msg.Data = b.msg.Payload()
	// No Nats-Msg-Id: the coordinator de-duplicates results by item index
	// and generation, and server-side dedupe would cost a map entry per
	// message.
	fut, err := a.pub.PublishMsgAsync(msg)
	if err != nil {
		a.log.Warn().Err(err).Int("results", len(b.targets)).Msg("result publish failed; items redelivered later")
		a.noteStoreFull("results", err)
		for _, t := range b.targets {
			_ = t.msg.NakWithDelay(time.Second)
		}
		return
	}
	a.metrics.resultMessages.Inc()
	a.acks <- pendingAck{fut: fut, targets: b.targets}
}

// ackLoop acknowledges work messages in the order their results are
// stored; it returns once a.acks is closed and drained.
func (a *Agent) ackLoop() {
	for p := range a.acks {
		var err error
		select {
		case <-p.fut.Ok():
		case err = <-p.fut.Err():
		}
		if err != nil {
			// Publish again under a message id: a try whose PubAck is lost
			// (a link that comes and goes) is then stored once, however
			// often it is tried within the results stream's dedupe window.
			msg := p.fut.Msg()
			if msg.Header == nil {
				msg.Header = nats.Header{}
			}
			if msg.Header.Get(jetstream.MsgIDHeader) == "" {
				msg.Header.Set(jetstream.MsgIDHeader, a.cfg.Name+"/"+nuid.Next())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = a.pub.PublishMsg(ctx, msg)
			cancel()
		}
		if err != nil && unreachable(err) {
			// The hub does not answer (a leaf's link is down): hold the
			// results until it does (link.go).
			err = a.storeHeld(a.stopHeld, p, err)
		}
		if err != nil {
			a.log.Warn().Err(err).Int("results", len(p.targets)).Msg("results not stored; items redelivered later")
			a.noteStoreFull("results", err)
			for _, t := range p.targets {
				_ = t.msg.NakWithDelay(time.Second)
			}
			continue
		}
		a.link.answered()
		a.settleWork(p.targets)
	}
}

// settleWork acks or terms the work messages whose results are stored.
// An item's retry state, if it had one, stays in the items bucket until
// the job's cleanup purges it (docs/retries.md §1): deleting it here cost
// the server a write and the ack loop a round trip per retried item.
func (a *Agent) settleWork(targets []ackTarget) {
	for _, t := range targets {
		a.settleOne(t)
	}
}

// settleOne acks or terms a work message whose result and state are
// settled.
func (a *Agent) settleOne(t ackTarget) {
	var err error
	if t.term {
		err = t.msg.Term()
	} else {
		err = t.msg.Ack()
	}
	if err != nil {
		a.log.Debug().Err(err).Msg("ack failed; a redelivery will re-report")
	}
}
