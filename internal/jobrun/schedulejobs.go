package jobrun

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jetfleet/jetfleet/internal/scheduler"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// scheduleJobs is the face of the coordinator's jobs the scheduler takes
// (internal/scheduler): a run's job is submitted and checked as
// jobs.submit does, and a run's state is its job's.
type scheduleJobs struct{ c *Coordinator }

func (j scheduleJobs) Submit(ctx context.Context, spec []byte) *messages.APIError {
	_, e := j.c.apiSubmit(ctx, spec)
	return e
}

func (j scheduleJobs) CheckSpec(spec json.RawMessage) (*messages.JobSpec, []messages.FieldError) {
	return j.c.admitSpec(spec)
}

func (j scheduleJobs) JobState(ctx context.Context, id string) (string, error) {
	rec, err := j.c.store.get(ctx, id)
	if errors.Is(err, errNoJob) {
		return "", scheduler.ErrNoJob
	}
	if err != nil {
		return "", err
	}
	return rec.Status.State, nil
}
