package jobrun

import (
	"context"
	"time"
)

// intakeWait bounds how long a cancel or pause of a job that is not found
// waits for the intake to take in the submissions it still holds.
const intakeWait = 5 * time.Second

// accepted reports whether job id has a record, waiting for it while the
// intake still holds submissions: submit answers once a submission is
// stored, and the leader takes it in a moment later, so a cancel or pause
// sent right after its submit would otherwise find no job.
func (c *Coordinator) accepted(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, intakeWait)
	defer cancel()
	for {
		// The intake is asked first: when it holds nothing, every
		// submission stored before this call has been taken in, and the
		// read that follows sees its record.
		held := c.intake.Holds(ctx)
		if _, err := c.store.get(ctx, id); err == nil {
			return true
		}
		if !held {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}
