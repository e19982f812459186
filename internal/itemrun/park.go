package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Parking: a retry or snooze whose delay is at least Config.ParkAfter does
// not wait in a delayed nak, which would hold one of the consumer's
// MaxAckPending slots for the whole delay (docs/jetstream.md §7): the
// agent writes the item's state with the park's number and due time,
// schedules a copy of the work message for that time in the park stream
// (a message schedule, docs/jetstream.md §16), waits for the PubAck and
// acks the delivery. When the schedule fires, the work stream sources the
// copy back onto the pool's work subject, and any agent runs it as the
// retry. docs/retries.md "Parking" walks through it.
//
// Exactly once across crashes rests on two things:
//   - the state is written before the copy is scheduled, with
//     ItemState.Park = n, and the copy carries WorkItem.Park = n: a delivery
//     whose Park is below the state's is superseded by a copy and is never
//     run. It schedules the copy again (resumePark) and is acked;
//   - the schedule's message id (wire.ParkMsgID) names the park, so
//     scheduling again what was scheduled is dropped by the park stream's
//     duplicate window, and the schedule's subject is the item's own, so a
//     later schedule replaces an earlier one not yet fired.

// parks reports whether a retry after delay is parked rather than naked.
func (a *Agent) parks(delay time.Duration) bool {
	return a.cfg.ParkAfter > 0 && delay >= a.cfg.ParkAfter && a.parkingOn()
}

// parkCheckTimeout bounds a look for the park stream: one stream info
// request.
const parkCheckTimeout = 5 * time.Second

// parkRecheckEvery spaces the looks for a park stream that did not exist.
const parkRecheckEvery = 5 * time.Second

// parkingOn reports whether the pool's park stream exists, looking again
// (at most every parkRecheckEvery) while it did not.
func (a *Agent) parkingOn() bool {
	if a.parking.Load() {
		return true
	}
	if a.parkRecheck == nil {
		return false
	}
	// Workers that ask meanwhile wait for the one look rather than
	// falling back to a delayed nak.
	a.parkMu.Lock()
	defer a.parkMu.Unlock()
	if a.parking.Load() {
		return true
	}
	now := a.cfg.hooks.Clock.Now()
	if now.Before(a.parkNext) {
		return false
	}
	a.parkNext = now.Add(parkRecheckEvery)
	if !a.parkRecheck() {
		return false
	}
	a.parking.Store(true)
	a.log.Info().Msg("the pool's park stream exists: long retries are parked")
	return true
}

// markPark records in the item's state, before it is persisted, that the
// delivery is parked for delay: the next park's number and when it is due.
func (a *Agent) markPark(it *item, delay time.Duration) {
	it.st.Park = max(it.st.Park, it.wi.Park) + 1
	it.st.ParkUntil = a.cfg.hooks.Clock.Now().Add(delay).Round(0)
}

// park schedules the parked copy the item's persisted state names and,
// once it is stored, acks the delivery. If scheduling fails the delivery
// comes back soon and, its Park below the state's, schedules it again.
func (a *Agent) park(ctx context.Context, it *item) {
	if err := a.schedule(ctx, it); err != nil {
		a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Msg("cannot park the item; trying again shortly")
		a.noteStoreFull("park", err)
		a.nakDelay(it, laterDelay)
		return
	}
	a.metrics.parked.WithLabelValues("parked").Inc()
	if h := a.cfg.hooks.AfterPark; h != nil && !h(it.wi.JobID, it.wi.ItemID) {
		return
	}
	a.ack(it)
}

// keepParked records the success of an item that was parked in this
// generation (final: succeeded): the delivery a parked copy superseded
// may still come back, and without it the delivery would run again (not
// written for want of the bucket, a superseded delivery schedules the copy
// again, a duplicate). fenced reports that another agent holds the item.
func (a *Agent) keepParked(ctx context.Context, it *item) (fenced bool) {
	if it.st.Park == 0 && it.wi.Park == 0 {
		return false
	}
	it.st.Final = messages.OutcomeSucceeded
	_, fenced = a.persist(ctx, it)
	return fenced
}

// resumePark handles a delivery that a parked copy superseded (its Park is
// below the state's): the agent that parked the item died between the
// schedule and the ack, or its ack was lost. The copy is scheduled again
// (a duplicate if it was stored; it replaces a pending schedule of the
// same park otherwise) and the delivery is acked without running. If the
// item has its outcome (the copy ran), the delivery is only acked. An
// agent that parks nothing itself (ParkAfter negative) does this too: the
// copies other agents parked are in the park stream.
func (a *Agent) resumePark(ctx context.Context, it *item) {
	if it.st.Final != "" {
		a.metrics.parked.WithLabelValues("superseded").Inc()
		a.ack(it)
		return
	}
	if !a.parkingOn() {
		it.wi.Park = it.st.Park
		a.runSteps(ctx, it)
		return
	}
	a.park(ctx, it)
	a.metrics.parked.WithLabelValues("superseded").Inc()
}

// schedule publishes the item's parked copy, due at the state's ParkUntil,
// and waits for its PubAck.
func (a *Agent) schedule(ctx context.Context, it *item) error {
	wi := it.wi
	wi.Park = it.st.Park
	data, err := json.Marshal(&wi)
	if err != nil {
		return fmt.Errorf("park: %w", err)
	}
	m := nats.NewMsg(wire.ParkSubject(a.names, a.cfg.Pool, wi.JobID, wi.ItemID))
	m.Data = data
	m.Header.Set(wire.HeaderSchedule, "@at "+it.st.ParkUntil.UTC().Format(time.RFC3339Nano))
	m.Header.Set(wire.HeaderScheduleTarget, wire.ParkDueSubject(a.names, a.cfg.Pool, wi.JobID))
	m.Header.Set(messages.HeaderMsgID, wire.ParkMsgID(wi.JobID, wi.ItemID, wi.Generation, wi.Park))
	if it.breakerParked {
		m.Header.Set(wire.HeaderParkReason, wire.ParkReasonBreaker)
	}
	if tp := it.m.Headers()[tracing.HeaderTraceparent]; len(tp) > 0 {
		m.Header[tracing.HeaderTraceparent] = tp // the parked copy stays in the item's trace
	}
	ctx, cancel := context.WithTimeout(ctx, publishAsyncTimeout)
	defer cancel()
	if _, err := a.pub.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("park: %w", err)
	}
	return nil
}

// ack acknowledges a parked delivery. A lost ack brings the delivery back
// after AckWait, superseded: resumePark acks it then.
func (a *Agent) ack(it *item) {
	if err := it.m.Ack(); err != nil {
		a.log.Debug().Err(err).Msg("ack failed; the superseded delivery will be acked again")
	}
}

// parkingAvailable reports whether pool's park stream exists: the
// coordinator makes it with the pool's first job, and until then the
// pool's agents wait out every retry in a delayed nak.
func parkingAvailable(ctx context.Context, js jetstream.JetStream, names messages.Names, pool string) (bool, error) {
	_, err := js.Stream(ctx, names.ParkStream(pool))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	}
	return false, err
}
