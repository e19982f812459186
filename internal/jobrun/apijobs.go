package jobrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetfleet/jetfleet/internal/api"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The coordinator's API is served by internal/api (the micro service, its
// deadlines and health checks, the endpoints' decoding and replies); it
// reaches the jobs only through the face below, apiJobs.

// endpointFunc answers one API request.
type endpointFunc = endpoint.Func

// apiEndpoints are the endpoints the API serves: the jobs' through
// apiJobs, the DLQ's, and the schedules' and the tests' beside them.
func (c *Coordinator) apiEndpoints() api.Endpoints {
	extra := c.schedules.Endpoints()
	for name, fn := range c.testEndpoints {
		extra[name] = fn
	}
	return api.Endpoints{
		Jobs:  apiJobs{c},
		DLQ:   api.DLQ{Inspector: c.dlq.insp, Replayer: c.dlq.rep, Replays: c.replays},
		Extra: extra, Teams: c.cfg.Teams,
		Conn: c.nc, Prefix: c.cfg.Prefix, Logger: c.log,
	}
}

// newAPIServer returns the API's server for the coordinator's run (ctx).
func (c *Coordinator) newAPIServer(ctx context.Context) *api.Server {
	probe := c.probe
	if probe == nil {
		r := kvleader.New(c.js, c.names.ControlBucket())
		probe = func(ctx context.Context) error {
			// The lease is rewritten every renewal interval: its stamp
			// tells the server's time (docs/design.md, "Clocks"). Read
			// from the stream leader: what a coordinator cut off the
			// cluster cannot do.
			_, _, stored, err := r.GetStamped(ctx, wire.LeaseKey)
			clock.Observe(c.cfg.hooks.Clock, stored)
			return err
		}
	}
	eps := c.apiEndpoints()
	all := eps.All()
	return api.NewServer(ctx, api.Config{
		Conn: c.nc, Prefix: c.cfg.Prefix, Names: c.names, Holder: c.cfg.Holder,
		Deadline: c.cfg.APIDeadline, WriteDeadline: c.cfg.APIWriteDeadline, Concurrency: c.cfg.APIConcurrency,
		HealthInterval: c.cfg.HealthInterval, HealthFailures: c.cfg.HealthFailures,
		Probe: probe, StoreFull: c.storeFullErr, Checked: c.noteStoreFull, CutOff: &c.cutOff,
		Endpoints: all, Team: eps.Team(all), Logger: c.log,
	})
}

// apiJobs is the face of the coordinator's jobs the API takes
// (internal/api): its errors carry the API's sentinels (asAPIError).
type apiJobs struct{ c *Coordinator }

func (j apiJobs) Submit(ctx context.Context, spec []byte, team string) (any, *messages.APIError) {
	return j.c.submitAs(ctx, spec, team)
}

func (j apiJobs) IsLeader() bool { return j.c.IsLeader() }

func (j apiJobs) StatusHere(ctx context.Context, data []byte) (any, *messages.APIError) {
	return j.c.apiStatusHere(ctx, data)
}

func (j apiJobs) NoLeader() *messages.APIError {
	c := j.c
	if c.lease != nil && natsconn.StoreFull(c.lease.WriteErr()) {
		// Why no coordinator leads, and so why the job does not move;
		// the gauge says so too, before the next health check.
		c.metrics.storeFull.Set(1)
		return apiErr(messages.CodeStoreFull, fmt.Sprintf(
			"store full: no coordinator can lead, the lease cannot be written (%v); the jobs resume once there is room", c.lease.WriteErr()))
	}
	return nil
}

func (j apiJobs) List(ctx context.Context, req messages.ListRequest) (messages.ListReply, error) {
	wctx, cancel := context.WithTimeout(ctx, indexWait)
	err := j.c.index.wait(wctx)
	cancel()
	if err != nil {
		return messages.ListReply{}, fmt.Errorf("the job index is still loading: %w", err)
	}
	reply, err := j.c.index.list(req)
	return reply, asAPIError(err)
}

func (j apiJobs) Cancel(ctx context.Context, id string, kill bool) (*messages.JobStatus, error) {
	var opts []CancelOption
	if kill {
		opts = append(opts, client.WithKill())
	}
	st, err := j.c.JobCancel(ctx, id, opts...)
	return st, asAPIError(err)
}

func (j apiJobs) Pause(ctx context.Context, id string) (*messages.JobStatus, error) {
	st, err := j.c.JobPause(ctx, id)
	return st, asAPIError(err)
}

func (j apiJobs) Resume(ctx context.Context, id string) (*messages.JobStatus, error) {
	st, err := j.c.JobResume(ctx, id)
	return st, asAPIError(err)
}

func (j apiJobs) PoolPause(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return j.c.PoolPause(ctx, pool)
}

func (j apiJobs) PoolResume(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return j.c.PoolResume(ctx, pool)
}

func (j apiJobs) Prune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	return j.c.JobPrune(ctx, req)
}

func (j apiJobs) Accepted(ctx context.Context, id string) bool { return j.c.accepted(ctx, id) }

func (j apiJobs) Teams(ctx context.Context, id string) (status, spec string, err error) {
	rec, err := j.c.store.getFromLeader(ctx, id)
	if errors.Is(err, errNoJob) && j.c.accepted(ctx, id) {
		rec, err = j.c.store.getFromLeader(ctx, id)
	}
	if err != nil {
		return "", "", asAPIError(err)
	}
	if rec.Spec != nil {
		spec = rec.Spec.Team
	}
	return rec.Status.Team, spec, nil
}

// asAPIError gives err, when it says no job, a finished job, a job past
// its map phase or a bad cursor, the API's sentinel for it, keeping its
// text.
func asAPIError(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range [...]struct{ ours, theirs error }{
		{errNoJob, api.ErrNoJob}, {errJobFinished, api.ErrJobFinished},
		{errMapEnded, api.ErrMapEnded}, {errBadCursor, api.ErrBadCursor},
	} {
		if errors.Is(err, m.ours) {
			return markedError{err, m.theirs}
		}
	}
	return err
}

// markedError is err that is also mark (errors.Is), with err's text.
type markedError struct{ err, mark error }

func (e markedError) Error() string   { return e.err.Error() }
func (e markedError) Unwrap() []error { return []error{e.err, e.mark} }
