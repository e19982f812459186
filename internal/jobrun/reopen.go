package jobrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ensureRunner makes sure a job's results are followed, so that reopen
// markers a DLQ replay writes (messages.OutcomeReopened) take effect: a
// lingering runner is held for another window; a finished job whose
// runner has exited is marked running again and gets a new runner, which
// rebuilds the counts from the results stream, markers included. Call it
// after the marker's PubAck and before republishing the item.
func (c *Coordinator) ensureRunner(ctx context.Context, id string) error {
	for {
		r := c.runner(id)
		if r == nil {
			break
		}
		if r.hold() {
			return nil
		}
		select { // it is returning: wait until it is gone, then start anew
		case <-r.exited:
		case <-ctx.Done():
			return ctx.Err()
		}
		for c.runner(id) == r {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	rec, rev, err := c.reopenRecord(ctx, id)
	if err != nil {
		return err
	}
	c.startRunner(*rec, rev)
	if c.runner(id) == nil {
		return errors.New("coordinator: shutting down")
	}
	return nil
}

// reopenRecord marks a finished job's record running again, with a
// compare-and-set so that it cannot cross a retention cleanup that began
// meanwhile (internal/retention): a job whose cleanup began is not reopened.
func (c *Coordinator) reopenRecord(ctx context.Context, id string) (*wire.JobRecord, uint64, error) {
	for {
		rec, rev, err := c.store.getRev(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		st := &rec.Status
		switch {
		case rec.Spec == nil:
			return nil, 0, fmt.Errorf("coordinator: job %s was rejected; nothing to reopen", id)
		case st.CleanupAt != nil:
			return nil, 0, fmt.Errorf("%w: %s", errCleaned, id)
		case !messages.TerminalState(st.State):
			return rec, rev, nil
		}
		st.State, st.CompletionReason, st.Phase, st.FinishedAt = messages.StateRunning, "", messages.PhaseMap, nil
		if st.MapReason == "" {
			// A record from before map reasons were kept: the job completed
			// with every item done.
			st.MapState, st.MapReason = messages.StateFailed, messages.CompletionAllCompleted
		}
		if nrev, ok, err := c.store.update(ctx, rec, rev); err != nil || ok {
			return rec, nrev, err
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
	}
}
