package itemrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Fleet limits (docs/limits.md): a step with `limit:` takes a token and a
// concurrency slot of its limit before each run, through the agent's
// limit.Limiter, and gives the slot back when the run ends; an adaptive
// limit hears the run's outcome. A run that gets neither within
// Config.LimitWait waits outside the agent, like a snooze: a delayed nak,
// or parked when the wait is long or the delivery nears MaxDeliver,
// spending no attempt and no budget. A slot's lease is renewed while the
// run lasts; an agent that dies stops renewing, and its slots come back
// when the lease ends.

// limitErrorDelay is how long an item waits when its limit cannot be read
// or written.
const limitErrorDelay = time.Second

// openLimits opens the limits bucket and the agent's limiter.
func (a *Agent) openLimits(ctx context.Context) error {
	kv, err := a.waitKV(ctx, a.names.LimitsBucket())
	if err != nil {
		return err
	}
	// The pool's share of each limit is the only part the agent writes
	// (docs/limits.md, "Shares between pools").
	store, err := limit.NewStore(a.js, kv, a.cfg.hooks.Clock, a.log, limit.WithPool(a.cfg.Pool))
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	// An id per run: a restarted agent of the same name does not inherit
	// its predecessor's leases.
	a.limitStore = store
	a.limits = limit.NewLimiter(store, a.cfg.Name+"."+hex.EncodeToString(id[:]), a.cfg.hooks.Clock, limit.NewMetrics(a.cfg.Registerer))
	return nil
}

// limitRequest is what step i of the item asks of its limit; ok is false
// for a step without one. A key that cannot be expanded is an error.
func (a *Agent) limitRequest(it *item, step *messages.Step) (q limit.Acquire, ok bool, err error) {
	l := step.Limit
	if l == nil {
		return q, false, nil
	}
	q = limit.Acquire{Pool: a.cfg.Pool, MaxWait: a.cfg.LimitWait, Lease: a.cfg.LimitLease}
	if l.Key == "" {
		q.Key, q.Label = limit.NamedKey(l.Name), l.Name
		return q, true, nil
	}
	t, err := wire.ParseTemplate(l.Key)
	if err != nil {
		return q, true, err
	}
	k, err := t.Render(wire.TemplateVars{Item: it.wi.Payload, ItemID: it.wi.ItemID, JobID: it.wi.JobID}, nil)
	if err != nil {
		return q, true, fmt.Errorf("limit key: %w", err)
	}
	if len(k) > messages.MaxLimitKeyBytes {
		return q, true, fmt.Errorf("limit key: %d bytes, at most %d", len(k), messages.MaxLimitKeyBytes)
	}
	cfg := l.LimitConfig.WithDefaults()
	q.Key, q.Label, q.Inline = limit.InlineKey(k), "inline", &cfg
	return q, true, nil
}

// admitLimit takes step i's limit for a run. It returns the ticket (nil
// for a step without a limit) and ok; when !ok the item waits outside the
// agent (naked or parked) or its state could not be saved, and the caller
// returns. f, when set, is a failure of the run itself: a key that does
// not expand, a named limit that does not exist.
func (a *Agent) admitLimit(ctx context.Context, it *item, i int) (t *limit.Ticket, f *retry.Failure, ok bool) {
	q, has, err := a.limitRequest(it, &it.set.steps[i])
	if !has {
		return nil, nil, true
	}
	if err != nil {
		return nil, &retry.Failure{Err: retry.Permanent(err)}, true
	}
	t, wait, err := a.limits.Acquire(ctx, q)
	switch {
	case t != nil:
		return t, nil, true
	case err != nil && killed(ctx):
		a.dropKilled(it) // the job was cancelled with kill while it waited
		return nil, nil, false
	case err != nil && ctx.Err() != nil:
		if a.writeLocal(it) {
			_ = it.m.Nak() // shutdown: back unspent
		}
		return nil, nil, false
	case errors.Is(err, limit.ErrNotFound), errors.Is(err, limit.ErrWrongPool):
		return nil, &retry.Failure{Err: fmt.Errorf("limit %q: %w", q.Label, err)}, true
	case err != nil:
		a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Str("limit", q.Label).
			Msg("limit unavailable; retrying later")
		wait = limitErrorDelay
	}
	a.limitWait(ctx, it, wait)
	return nil, nil, false
}

// limitWait makes the item wait d outside the agent for its limit, as a
// snooze does: nothing is spent. The wait is spread (up to half again)
// so that the items refused together do not all come back at once. It
// is parked when long, or when the delivery is past half of MaxDeliver
// (a parked copy is a new message: naks alone could exhaust MaxDeliver
// while the limit is busy).
func (a *Agent) limitWait(ctx context.Context, it *item, d time.Duration) {
	d += time.Duration(float64(d) * 0.5 * a.cfg.hooks.Rand.Float64())
	d = max(d, a.cfg.LimitWait)
	nearEnd := a.maxDeliver > 0 && it.md.NumDelivered*2 >= a.maxDeliver
	if nearEnd && a.cfg.ParkAfter > 0 {
		d = max(d, a.cfg.ParkAfter)
	}
	a.metrics.limitWaits.Inc()
	if a.parks(d) {
		a.markPark(it, d)
		switch saved, fenced := a.persist(ctx, it); {
		case saved:
			a.park(ctx, it)
			return
		case fenced:
			return
		}
		a.nakDelay(it, d)
		return
	}
	// A delayed nak: the item must resume at this step, so a state that
	// records an earlier step (or an item past its first step) is saved.
	if it.rev != 0 || it.st.Step > 0 {
		if saved, fenced := a.persist(ctx, it); fenced || !saved && it.st.Step > 0 {
			if !fenced {
				a.nakDelay(it, limitErrorDelay)
			}
			return
		}
	}
	a.nakDelay(it, d)
}

// runLimited runs fn holding the ticket: its slot's lease is renewed
// every third of the lease while fn runs, and released with the run's
// outcome when it returns.
func (a *Agent) runLimited(ctx context.Context, t *limit.Ticket, fn func() *retry.Failure) *retry.Failure {
	if t == nil {
		return fn()
	}
	if !t.HoldsSlot() {
		// A token only: no lease to renew.
		f := fn()
		if err := a.limits.Release(ctx, t, limitOutcome(ctx, f)); err != nil {
			a.log.Debug().Err(err).Str("limit", t.Label()).Msg("limit outcome not recorded")
		}
		return f
	}
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(a.cfg.LimitLease / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if err := a.limits.Renew(context.WithoutCancel(ctx), t); err != nil {
					a.log.Debug().Err(err).Str("limit", t.Label()).Msg("limit slot lease not renewed")
				}
			}
		}
	}()
	f := fn()
	close(done)
	<-renewed
	if err := a.limits.Release(ctx, t, limitOutcome(ctx, f)); err != nil {
		a.log.Debug().Err(err).Str("limit", t.Label()).Msg("limit slot not released; its lease will end it")
	}
	return f
}

// limitOutcome is what a run says about the limited dependency
// (limit.OutcomeOf), or nothing when the run was cancelled.
func limitOutcome(ctx context.Context, f *retry.Failure) limit.Outcome {
	if ctx.Err() != nil {
		return limit.Neutral
	}
	return limit.OutcomeOf(f)
}
