package itemrun

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/pause"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Holding (docs/jobs.md "Pause and resume"): the agent follows the pause
// bucket (a.pauses). A delivery of a paused job's item, or any delivery
// while the agent's pool is paused, is not run: the agent stores a copy
// of the work message in the pool's park stream (HeldSubject, with
// WorkItem.Held one higher), waits for the PubAck, and acks the delivery.
// The held copy is not a schedule: it stays until the leader moves it
// back onto the work stream when the job and the pool are no longer
// paused. Its message id names the delivery's stream sequence, so a
// delivery held twice (the agent died before its ack) is stored once.
// An item paused while a step runs finishes that step and is held before
// the next one, its state persisted so that it resumes there
// (holdBetweenSteps).

// holds reports whether the item must be held rather than run. The
// reduce item is never held: a job whose map phase ended cannot be paused.
func (a *Agent) holds(it *item) bool {
	return a.pauses != nil && it.wi.Phase != messages.PhaseReduce && a.pauses.By(it.wi.JobID, a.cfg.Pool) != ""
}

// hold stores the item's held copy and acks the delivery; if the copy
// cannot be stored the delivery comes back shortly.
func (a *Agent) hold(ctx context.Context, it *item) {
	if !a.writeLocal(it) {
		return // another agent holds the item
	}
	wi := it.wi
	wi.Held++
	data, err := json.Marshal(&wi)
	if err == nil {
		m := nats.NewMsg(wire.HeldSubject(a.names, a.cfg.Pool, wi.JobID, wi.ItemID))
		m.Data = data
		m.Header.Set(messages.HeaderMsgID, wire.HeldMsgID(wi.JobID, wi.ItemID, wi.Generation, it.md.Sequence.Stream))
		if tp := it.m.Headers()[tracing.HeaderTraceparent]; len(tp) > 0 {
			m.Header[tracing.HeaderTraceparent] = tp
		}
		pctx, cancel := context.WithTimeout(ctx, publishAsyncTimeout)
		_, err = a.pub.PublishMsg(pctx, m)
		cancel()
	}
	if err != nil {
		a.log.Warn().Err(fmt.Errorf("hold: %w", err)).Str("job_id", wi.JobID).Str("item_id", wi.ItemID).Msg("cannot hold the paused item; trying again shortly")
		a.nakDelay(it, laterDelay)
		return
	}
	a.metrics.parked.WithLabelValues("held").Inc()
	a.ack(it)
}

// followPauses follows the pause bucket until the returned stop is
// called, once the view holds what is paused now: no item of a job paused
// before the agent started runs.
func (a *Agent) followPauses(ctx context.Context) (stop func(), err error) {
	a.pauses = pause.NewView()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.pauses.Keep(wctx, a.pauseKV, a.log, nil)
	}()
	stop = func() { cancel(); <-done }
	select {
	case <-a.pauses.Ready():
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// holdBetweenSteps holds an item whose job or pool was paused while one
// of its steps ran: its state (the next step, the outputs so far) is
// persisted, so that the held copy, when it runs, starts at the next step.
// The job's breaker ticket is settled as not counting: the item did not
// fail or succeed.
func (a *Agent) holdBetweenSteps(ctx context.Context, it *item) {
	saved, fenced := a.persist(ctx, it)
	if fenced {
		return // another agent holds the item
	}
	if !saved {
		a.nakDelay(it, laterDelay) // the next delivery resumes at the persisted step
		return
	}
	a.settleBreaker(ctx, it, retry.OutcomeIgnored)
	a.hold(ctx, it)
}
