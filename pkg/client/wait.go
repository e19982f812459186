package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// waitCheck is how often Wait reads the status when nothing else makes it:
// events are best effort (a coordinator publishes them without waiting for
// the server, and a reconnecting client misses what was sent meanwhile),
// so a lost one delays the end by at most this long.
const waitCheck = 5 * time.Second

// teamWaitCheck is how often Wait reads the status for a team's client,
// which follows no events.
const teamWaitCheck = time.Second

// JobWait returns a job's status once it is terminal, or when ctx ends. It
// learns of the end from the job's events, not by polling: it subscribes
// to the job's completed and rejected events (fleet.events.<job>.completed,
// .rejected) before it reads the status, so an end between the two is not
// missed, and reads the status again when an event says the job ended.
//
// onUpdate (if not nil) is called with the status every interval while the
// job runs, for progress displays, and with the final status; interval
// only paces those calls (≤ 0: 250ms). Without onUpdate the status is read
// only at the start, on the events, and every few seconds in case an event
// was lost. A job not known yet (a durable submission the coordinator has
// not taken in) is waited for; a coordinator that does not answer is
// waited for until ctx ends.
func (c *Client) JobWait(ctx context.Context, id string, interval time.Duration, onUpdate func(*messages.JobStatus)) (*messages.JobStatus, error) {
	if err := messages.ValidToken(id); err != nil {
		return nil, fmt.Errorf("client: job id %q: %w", id, err)
	}
	ended := make(chan struct{}, 1)
	notify := func(*nats.Msg) {
		select {
		case ended <- struct{}{}:
		default:
		}
	}
	follow := []string{messages.EventCompleted, messages.EventRejected}
	if c.team != "" {
		follow = nil // a team's key hears no events (WithTeam): the status is read every teamWaitCheck
	}
	for _, typ := range follow {
		sub, err := c.nc.Subscribe(c.names.EventSubject(id, typ), notify)
		if err != nil {
			return nil, fmt.Errorf("client: following job %s: %w", id, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	// No flush needed: the server handles a connection's protocol in
	// order, so the subscriptions are in place before it passes on the
	// status request below, and an end after that read is heard.

	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	if onUpdate == nil {
		interval = waitCheck
		if c.team != "" {
			interval = teamWaitCheck
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var st *messages.JobStatus
	var lastErr error
	for {
		cur, err := c.JobStatus(ctx, id)
		var apiErr *messages.APIError
		switch {
		case err == nil:
			// A status older than one already seen (an earlier AsOf: a
			// coordinator answering from a record written before the counts
			// it showed) is skipped, so the counts never go back.
			if !older(cur, st) {
				st = cur
			}
			if onUpdate != nil {
				onUpdate(st)
			}
			if messages.TerminalState(st.State) {
				return st, nil
			}
		case errors.As(err, &apiErr) && apiErr.Code == messages.CodeNotFound:
			// A durable submission not yet taken in: keep waiting.
		case errors.As(err, &apiErr) && (apiErr.Code == messages.CodeStoreFull || apiErr.Code == messages.CodeUnavailable):
			// No coordinator leads now (a failover, a partition, a full
			// store: only the leader answers status). The job resumes once
			// one does. Keep waiting; say why at the end.
			lastErr = err
		case ctx.Err() != nil:
			return st, ctx.Err()
		case errors.As(err, &apiErr):
			return nil, err
		default:
			// No responders or a timeout: a coordinator or server restart
			// in progress. Keep watching until ctx ends.
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return st, fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
			}
			return st, ctx.Err()
		case <-ended:
		case <-t.C:
		}
	}
}
