package itemrun

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Releasing breaker parks: an item that a job's circuit breaker refused is
// parked until the breaker would let it through (the open period's end,
// or a quarter of the timeout while half-open), marked
// HeaderParkReason=breaker. When an agent of the pool sees the breaker
// close (its own write, a read, or the watch: the gate's onClosed), it
// reschedules each marked schedule of the job still pending in the pool's
// park stream to fire now, unmarked. The replacement is conditional on
// the schedule being the subject's last message (it has not fired, and no
// other agent has released it), so an item is released once, and its
// parked copy (the same park number) runs once. A retry's backoff park is
// not marked and keeps its time.
//
// Only agents that follow the breaker (they ran or parked the job's items
// since it last changed) see it close; parked items that no running agent
// follows come back at their own time, as before.

// releaseTimeout bounds one release of a job's parked items.
const releaseTimeout = time.Minute

// releaseSoon releases, in the background, the items the job's breaker
// parked in the pool's park stream. It never blocks (it is called under
// the breaker store's lock) and does nothing once the agent stops.
func (a *Agent) releaseSoon(job string) {
	a.relMu.Lock()
	defer a.relMu.Unlock()
	if a.relCtx == nil || a.relCtx.Err() != nil {
		return
	}
	a.relWG.Add(1)
	go func() {
		defer a.relWG.Done()
		ctx, cancel := context.WithTimeout(a.relCtx, releaseTimeout)
		defer cancel()
		n, err := a.releaseParked(ctx, job)
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Warn().Err(err).Str("job_id", job).Int("released", n).
				Msg("cannot release the items the closed circuit breaker parked; they come back at their time")
		case n == 0:
			a.log.Debug().Str("job_id", job).Msg("circuit breaker closed: no parked item to release")
		default:
			a.metrics.parked.WithLabelValues("released").Add(float64(n))
			a.log.Info().Str("job_id", job).Int("released", n).Msg("circuit breaker closed: released the items it parked")
		}
	}()
}

// startReleases lets releaseSoon run until the returned stop, which
// cancels the releases under way and waits for them.
func (a *Agent) startReleases(ctx context.Context) (stop func()) {
	a.relMu.Lock()
	var cancel context.CancelFunc
	a.relCtx, cancel = context.WithCancel(ctx)
	a.relMu.Unlock()
	return func() {
		a.relMu.Lock()
		cancel()
		a.relMu.Unlock()
		a.relWG.Wait()
	}
}

// releaseParked reschedules to now the job's breaker-parked items pending
// in the pool's park stream and returns how many it released. The park
// stream is a work queue, which allows no consumer that does not ack: the
// schedules are found by subject (the stream's subject counts) and read
// one by one as their subject's last message.
func (a *Agent) releaseParked(ctx context.Context, job string) (int, error) {
	stream, err := a.js.Stream(ctx, a.names.ParkStream(a.cfg.Pool))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil // nothing parked: the pool has no park stream
	}
	if err != nil {
		return 0, err
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(wire.JobParkSubjects(a.names, a.cfg.Pool, job)))
	if err != nil {
		return 0, err
	}
	released := 0
	for subject := range info.State.Subjects {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // fired meanwhile
		}
		if err != nil {
			return released, err
		}
		ok, err := a.release(ctx, m)
		if err != nil {
			return released, err
		}
		if ok {
			released++
		}
	}
	return released, nil
}

// release replaces the breaker-parked schedule m by one that fires now,
// if it is still its subject's last message. It reports whether it did.
func (a *Agent) release(ctx context.Context, m *jetstream.RawStreamMsg) (bool, error) {
	h := m.Header
	if h.Get(wire.HeaderParkReason) != wire.ParkReasonBreaker || h.Get(wire.HeaderSchedule) == "" {
		return false, nil
	}
	r := nats.NewMsg(m.Subject)
	r.Data = m.Data
	for k, v := range h {
		r.Header[k] = v
	}
	r.Header.Del(wire.HeaderParkReason)
	r.Header.Set(wire.HeaderSchedule, "@at "+a.cfg.hooks.Clock.Now().UTC().Format(time.RFC3339Nano))
	r.Header.Set(messages.HeaderMsgID, h.Get(messages.HeaderMsgID)+".released")
	_, err := a.js.PublishMsg(ctx, r, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return false, nil // fired, or released by another agent
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
