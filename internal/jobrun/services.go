package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/retention"
	"github.com/jetfleet/jetfleet/internal/scheduler"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The leader's services that live in packages of their own take the
// coordinator's jobs through the narrow faces below, each only what its
// service needs: internal/scheduler (schedules), internal/retention
// (cleanup, expiry, jobs.prune) and internal/replay (DLQ replays).

// The retention defaults and bounds (internal/retention).
const (
	DefaultJobRetention    = retention.DefaultJobRetention
	DefaultCleanupInterval = retention.DefaultCleanupInterval
	DefaultPruneMarkerTTL  = retention.DefaultPruneMarkerTTL
	MinJobRetention        = retention.MinJobRetention
)

// RetentionStats says what a retention pass or a prune did.
type RetentionStats = retention.Stats

// errCleaned refuses to reopen a job whose data was removed.
var errCleaned = fmt.Errorf("%w: the job was cleaned up after it settled (retention)", dlq.ErrNotReplayable)

// RetentionPass cleans up every settled job and deletes the records
// expired under JobRetention, once.
func (c *Coordinator) RetentionPass(ctx context.Context) (RetentionStats, error) {
	return c.retention.Pass(ctx)
}

// JobPrune deletes the records (and what is left of their data) of jobs
// that finished at least req.OlderThan ago, as jobs.prune does
// (internal/retention).
func (c *Coordinator) JobPrune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	return c.retention.JobPrune(ctx, req)
}

// scheduleJobs is the face of the coordinator's jobs the scheduler takes
// (internal/scheduler): a run's job is submitted and checked as
// jobs.submit does, and a run's state is its job's.
type scheduleJobs struct{ c *Coordinator }

func (j scheduleJobs) Submit(ctx context.Context, spec []byte) *messages.APIError {
	_, e := j.c.submitAs(ctx, spec, "")
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

// retentionJobs is the face of the coordinator's jobs retention takes
// (internal/retention): the job records, the index of finished jobs, and
// what this coordinator still holds of a job.
type retentionJobs struct{ c *Coordinator }

func (j retentionJobs) Wait(ctx context.Context) error { return j.c.index.wait(ctx) }

func (j retentionJobs) Finished(keep func(*messages.JobStatus) bool) []messages.JobStatus {
	return j.c.index.finished(keep)
}

func (j retentionJobs) Followed(id string) bool {
	return j.c.runner(id) != nil || j.c.replayHolding(id)
}

func (j retentionJobs) Get(ctx context.Context, id string) (*wire.JobRecord, uint64, error) {
	rec, rev, err := j.c.store.getRev(ctx, id)
	if errors.Is(err, errNoJob) {
		return nil, 0, retention.ErrNoJob
	}
	return rec, rev, err
}

func (j retentionJobs) Update(ctx context.Context, rec *wire.JobRecord, rev uint64) (uint64, bool, error) {
	return j.c.store.update(ctx, rec, rev)
}

func (j retentionJobs) Remove(ctx context.Context, id string, rev uint64, markerTTL time.Duration) (bool, error) {
	return j.c.store.remove(ctx, id, rev, markerTTL)
}

func (j retentionJobs) Forget(rec *wire.JobRecord) { j.c.forgetBudgets(rec) }

func (j retentionJobs) DropPause(ctx context.Context, id string) { j.c.dropPause(ctx, id) }

func (j retentionJobs) RemoveSpecs(ctx context.Context, rec *wire.JobRecord) error {
	return j.c.removeSpecs(ctx, rec)
}

// replayJobs is the face of the coordinator's jobs the replays take
// (internal/replay): a released job completes if it is done, a replay's
// events, and the pools its routing looked up.
type replayJobs struct{ c *Coordinator }

func (j replayJobs) Recheck(job string) {
	if r := j.c.runner(job); r != nil {
		r.recheck()
	}
}

func (j replayJobs) Event(job string, ev messages.EventPayload) { j.c.event(job, ev) }

func (j replayJobs) ForgetPools(jobs []string) { j.c.dlq.forgetPools(jobs) }
