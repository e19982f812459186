package itemrun

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// How an agent rides out a link that comes and goes. An agent behind a
// leaf node stays connected to its leaf server when the leaf's link to the
// hub drops: pulls, result publishes and acks then find no JetStream (no
// responders, or a timeout while the leaf has not noticed yet). The agent
// finishes the steps it is running; it keeps the results it cannot store
// (the batcher and the ack loop hold them, and the workers wait on them
// rather than take more work) and stores them, then acks their work
// messages, once the hub answers again. Pulls keep trying with the usual
// backoff. One line says the hub is unreachable and one that it is back,
// with how long it was gone and how many results waited: never a line per
// try. A result stored after its work message's AckWait meets the
// redelivered copy's at the coordinator, which counts each item once.

// linkState says whether the hub's JetStream answers the agent. It is safe
// for concurrent use; a nil one (an agent not set up by Run) records
// nothing.
type linkState struct {
	log zerolog.Logger
	now func() time.Time

	mu        sync.Mutex
	downSince time.Time // zero while the hub answers
	held      int       // results that waited for the hub
}

func newLinkState(log zerolog.Logger, domain string) *linkState {
	return &linkState{log: log.With().Str("js_domain", domain).Logger(), now: time.Now}
}

// lost records that a call found no JetStream; the first of a run logs
// one warning. what says what failed.
func (l *linkState) lost(err error, what string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.downSince.IsZero() {
		return
	}
	l.downSince = l.now()
	l.log.Warn().Err(err).Str("failed", what).
		Msg("JetStream does not answer (a leaf node's link to the hub down, a wrong --js-domain, or a server too busy to answer in time): running steps finish, their results wait here and are reported when it answers again")
}

// hold counts n results that wait for the hub.
func (l *linkState) hold(n int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.held += n
	l.mu.Unlock()
}

// answered records that a call reached JetStream; after a run of failures
// it logs one line saying for how long the hub did not answer.
func (l *linkState) answered() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.downSince.IsZero() {
		return
	}
	l.log.Info().Dur("down_for", l.now().Sub(l.downSince)).Int("results_held", l.held).
		Msg("JetStream answers again: pulling, and reporting the results that waited")
	l.downSince, l.held = time.Time{}, 0
}

// down reports whether the hub's JetStream did not answer the last call.
func (l *linkState) down() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.downSince.IsZero()
}

// unreachableItem reports whether err, from reading or writing an item's
// state, is the hub not answering. If so it records the loss (one warning
// per cut, like every other call) and the caller logs the item's line at
// debug: a cut meets every item in its retry path, and a line per item is
// noise that hides the one line that matters.
func (l *linkState) unreachableItem(err error, what string) bool {
	if l == nil || !unreachable(err) {
		return false
	}
	l.lost(err, what)
	return true
}

// fencedLogPeriod spaces the warnings that an item's state changed under
// this agent: after a cut or a pause every item whose AckWait ran out
// meets its redelivered copy at once, and one line per period (the
// jetfleet_agent metrics count every one) says what happened.
const fencedLogPeriod = 30 * time.Second

// unreachable reports whether err is what a call gets while the hub's
// JetStream cannot be reached: no responders, no answer in time, or a
// pull whose heartbeats stopped.
func unreachable(err error) bool {
	return natsconn.ClusterLoss(err) || natsconn.Unreachable(err) || errors.Is(err, jetstream.ErrNoHeartbeat)
}

// heldBackoff spaces the tries to store held results: 250ms doubling to 5s.
var heldBackoff = retry.Exponential(250*time.Millisecond, 5*time.Second)

// heldPublishTimeout bounds one try to store held results.
const heldPublishTimeout = 5 * time.Second

// storeHeld stores the results message of p that failed with err because
// the hub did not answer: it tries again with backoff until the hub
// answers, stop ends (shutdown: the items are redelivered after AckWait),
// or the store fails for another reason. It returns the last error.
func (a *Agent) storeHeld(stop <-chan struct{}, p pendingAck, err error) error {
	a.link.lost(err, "results")
	a.link.hold(len(p.targets))
	b := retry.NewBackoff(heldBackoff, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for unreachable(err) {
		if b.Wait(ctx) != nil {
			return err
		}
		pctx, pcancel := context.WithTimeout(ctx, heldPublishTimeout)
		var ack *jetstream.PubAck
		ack, err = a.pub.PublishMsg(pctx, p.fut.Msg())
		pcancel()
		if err == nil && ack != nil {
			a.link.answered()
			return nil
		}
	}
	return err
}
