package natsconn

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// Defaults of Reach.
const (
	// ReachMin and ReachMax bound the pause between tries while no
	// JetStream answers: it doubles from the minimum up to the maximum.
	ReachMin = 500 * time.Millisecond
	ReachMax = 30 * time.Second
	// ReachRepeat is how often the warning is repeated while no JetStream
	// answers: a line per try would flood the log of a site whose link is
	// down for hours.
	ReachRepeat = 5 * time.Minute
)

// Reacher runs a component's first JetStream calls until JetStream
// answers. The zero value is ready to use. Not safe for concurrent use.
type Reacher struct {
	// Logger gets one warning when no JetStream answers (naming the domain
	// setting), repeated every ReachRepeat while it lasts, and one line
	// when it answers again.
	Logger zerolog.Logger
	// Domain is the JetStream domain the calls go to, for the warning.
	Domain string
	// Clock spaces the tries. Defaults to the system clock.
	Clock clock.Clock
	// Now is the clock of the repeated warning. Defaults to time.Now.
	Now func() time.Time
}

// Reach calls try until it returns nil or an error other than Unreachable
// or TimedOut (which it returns), or ctx ends (ctx's error). Between tries
// it waits ReachMin doubling to ReachMax. what names the calls in the log,
// e.g. "work consumer agents-site-b".
func (r Reacher) Reach(ctx context.Context, what string, try func(ctx context.Context) error) error {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	pauses := retry.NewBackoff(retry.Exponential(ReachMin, ReachMax), nil, r.Clock)
	var since, warned time.Time
	for {
		err := try(ctx)
		timedOut := TimedOut(ctx, err)
		if err == nil || !(Unreachable(err) || timedOut) || ctx.Err() != nil {
			if err == nil && !since.IsZero() {
				r.Logger.Info().Str("js_domain", r.Domain).Dur("after", now().Sub(since)).Msg("JetStream answers: " + what)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		t := now()
		if since.IsZero() {
			since = t
		}
		if warned.IsZero() || t.Sub(warned) >= ReachRepeat {
			warned = t
			hint := UnreachableHint(r.Domain)
			if timedOut {
				hint = timedOutHint
			}
			r.Logger.Warn().Err(err).Str("js_domain", r.Domain).Dur("down_for", t.Sub(since)).
				Msg(what + ": " + hint + "; retrying with backoff")
		}
		if err := pauses.Wait(ctx); err != nil {
			return err
		}
	}
}

// TimedOut reports whether err is a request's own timeout (no answer in
// time), not the end of ctx: a cluster electing its leaders, a server slow
// under load. Worth asking again.
func TimedOut(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))
}

// timedOutHint says what a request that went unanswered may mean. A
// request the account's permissions deny also goes unanswered until its
// timeout (the server tells only the connection's error handler).
const timedOutHint = "no answer in time: check that the cluster has elected its leaders and is not overloaded, " +
	"and that this account's permissions allow the JetStream API calls"
