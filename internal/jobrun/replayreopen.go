package jobrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Reopening a job for a DLQ replay (docs/dlq.md, "Reopen semantics").
//
// Before republishing an item the replayer stores a reopen marker on the
// job's results subject (generation+1, outcome "reopened"), then calls
// reopenForReplay. The job's runner applies the marker like any result
// (applyReopen): the item's earlier outcome stops counting and the runner
// waits for the new generation's result, so the job cannot finish without
// it. Because the marker lives in the results stream, a coordinator that
// restarts rebuilds the same counts. A job whose runner has exited is
// restarted by ensureRunner and replays its results, markers included.

const (
	// reopenWait bounds how long a replay waits for a job's runner to take a
	// marker in (a restarted runner first replays all of the job's results).
	reopenWait = 2 * time.Minute
	// reopenPoll is how often it looks.
	reopenPoll = 2 * time.Millisecond
)

// reopenForReplay is the replayer's dlq.ReopenFunc: it returns once a
// runner of the job has applied the marker of generation gen of e's item
// (or seen a later generation), restarting the runner of a finished job,
// and again if a lingering runner exits before the marker reaches it.
func (c *Coordinator) reopenForReplay(ctx context.Context, e *messages.DLQEntry, gen int, _ uint64) error {
	ctx, cancel := context.WithTimeout(ctx, reopenWait)
	defer cancel()
	c.mu.Lock()
	runCtx := c.runCtx
	c.mu.Unlock()
	if runCtx != nil {
		defer context.AfterFunc(runCtx, cancel)() // a coordinator shutdown ends the wait
	}
	for {
		if c.runner(e.JobID) == nil {
			if err := c.replayable(ctx, e.JobID); err != nil {
				return err
			}
		}
		if err := c.ensureRunner(ctx, e.JobID); err != nil {
			return c.reopenErr(ctx, e, err)
		}
		r := c.runner(e.JobID)
		for r != nil && c.runner(e.JobID) == r {
			if r.hasGeneration(e.Index, gen) {
				return nil
			}
			select {
			case <-ctx.Done():
				return c.reopenErr(ctx, e, ctx.Err())
			case <-time.After(reopenPoll):
			}
		}
		// The runner went away before the marker reached it: start another,
		// which replays the results, the marker included.
	}
}

func (c *Coordinator) reopenErr(ctx context.Context, e *messages.DLQEntry, err error) error {
	select {
	case <-c.stopping():
		return errCoordinatorStopping
	default:
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("job %s has not taken in the reopen marker of %s within %s", e.JobID, e.ItemID, reopenWait)
	}
	return err
}

// replayable fails entries of jobs that cannot be reopened.
func (c *Coordinator) replayable(ctx context.Context, job string) error {
	rec, err := c.store.get(ctx, job)
	switch {
	case errors.Is(err, errNoJob):
		return fmt.Errorf("%w: job %q does not exist", dlq.ErrNotReplayable, job)
	case err != nil:
		return err
	case rec.Spec == nil:
		return fmt.Errorf("%w: job %q was %s", dlq.ErrNotReplayable, job, rec.Status.State)
	case rec.Status.CleanupAt != nil:
		return fmt.Errorf("%w: job %q settled and its results were removed at %s (retention); submit the entries as a new job (fleetctl dlq export)",
			dlq.ErrNotReplayable, job, rec.Status.CleanupAt.UTC().Format(time.RFC3339))
	}
	return nil
}

var errCoordinatorStopping = errors.New("coordinator: stopping")

// stopping is closed when the coordinator's Run ends (nil before Run).
func (c *Coordinator) stopping() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx == nil {
		return nil
	}
	return c.runCtx.Done()
}

// replayHolding reports whether a replay holds job (checkLocked).
func (c *Coordinator) replayHolding(job string) bool {
	return c.replays != nil && c.replays.Holding(job)
}

// recheck applies completion now (a replay's hold was released).
func (r *jobRunner) recheck() {
	r.mu.Lock()
	r.checkLocked(nil)
	r.mu.Unlock()
	r.wakeUp()
}

// hasGeneration reports whether the runner has seen generation gen (or a
// later one) of item idx: its reopen marker or its result.
func (r *jobRunner) hasGeneration(idx int64, gen int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gens[idx] >= gen
}
