package client

import (
	"context"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// JobPause pauses a job: no new step of it starts within a second, the steps
// running finish (docs/jobs.md "Pause and resume"). It returns the job's
// status once it says paused (or after a few seconds, as it is then).
func (c *Client) JobPause(ctx context.Context, id string) (*messages.JobStatus, error) {
	r, err := call[messages.StatusReply](ctx, c, messages.EndpointJobsPause, messages.JobRequest{JobID: id})
	if err != nil {
		return nil, err
	}
	return r.Status, nil
}

// JobResume resumes a paused job; it stays paused while its pool is.
func (c *Client) JobResume(ctx context.Context, id string) (*messages.JobStatus, error) {
	r, err := call[messages.StatusReply](ctx, c, messages.EndpointJobsResume, messages.JobRequest{JobID: id})
	if err != nil {
		return nil, err
	}
	return r.Status, nil
}

// PoolPause pauses every job of a pool and every item routed to it.
func (c *Client) PoolPause(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return call[messages.PoolPauseReply](ctx, c, messages.EndpointPoolsPause, messages.PoolRequest{Pool: pool})
}

// PoolResume resumes a paused pool.
func (c *Client) PoolResume(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return call[messages.PoolPauseReply](ctx, c, messages.EndpointPoolsResume, messages.PoolRequest{Pool: pool})
}
