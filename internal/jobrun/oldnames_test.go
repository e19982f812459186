package jobrun

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Old names, kept working. The client moved to package client, whose
// names follow the API's (JobCancel for jobs.cancel, PoolPause for
// pools.pause), and the Coordinator's methods follow them too.

// Client is a [client.Client] that also answers to the old method names.
//
// Deprecated: use client.Client.
type Client struct{ *client.Client }

// ClientOption configures a Client.
//
// Deprecated: use client.Option.
type ClientOption = client.Option

// NewClient returns a client for the fleet under prefix ("" = "fleet").
//
// Deprecated: use client.New.
func NewClient(nc *nats.Conn, prefix string, opts ...ClientOption) (*Client, error) {
	c, err := client.New(nc, prefix, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// WithClientTracerProvider is client.WithTracerProvider.
//
// Deprecated: use client.WithTracerProvider.
func WithClientTracerProvider(tp trace.TracerProvider) ClientOption {
	return client.WithTracerProvider(tp)
}

// WithFailover is client.WithFailover.
//
// Deprecated: use client.WithFailover.
func WithFailover() ClientOption { return client.WithFailover() }

// WithKill is client.WithKill.
//
// Deprecated: use client.WithKill.
func WithKill() CancelOption { return client.WithKill() }

// ItemsOf is client.ItemsOf.
//
// Deprecated: use client.ItemsOf.
func ItemsOf[T any](items ...T) ([]json.RawMessage, error) { return client.ItemsOf(items...) }

// ErrNoCoordinator is client.ErrNoCoordinator.
//
// Deprecated: use client.ErrNoCoordinator.
var ErrNoCoordinator = client.ErrNoCoordinator

// The client's timing, now package client's.
//
// Deprecated: use client.ReadAttempt, client.SubmitAttempt,
// client.FailoverAfter and client.NoCoordinatorWait.
const (
	ReadAttempt       = client.ReadAttempt
	SubmitAttempt     = client.SubmitAttempt
	FailoverAfter     = client.FailoverAfter
	NoCoordinatorWait = client.NoCoordinatorWait
)

// Submit is JobSubmit.
//
// Deprecated: use client.Client.JobSubmit.
func (c *Client) Submit(ctx context.Context, specJSON []byte) (*messages.SubmitReply, error) {
	return c.JobSubmit(ctx, specJSON)
}

// SubmitSpec is JobSubmitSpec.
//
// Deprecated: use client.Client.JobSubmitSpec.
func (c *Client) SubmitSpec(ctx context.Context, spec *messages.JobSpec) (*messages.SubmitReply, error) {
	return c.JobSubmitSpec(ctx, spec)
}

// Status is JobStatus.
//
// Deprecated: use client.Client.JobStatus.
func (c *Client) Status(ctx context.Context, id string) (*messages.JobStatus, error) {
	return c.JobStatus(ctx, id)
}

// List is JobList.
//
// Deprecated: use client.Client.JobList.
func (c *Client) List(ctx context.Context, req messages.ListRequest) ([]messages.JobStatus, error) {
	return c.JobList(ctx, req)
}

// ListPage is JobListPage.
//
// Deprecated: use client.Client.JobListPage.
func (c *Client) ListPage(ctx context.Context, req messages.ListRequest) (*messages.ListReply, error) {
	return c.JobListPage(ctx, req)
}

// Wait is JobWait.
//
// Deprecated: use client.Client.JobWait.
func (c *Client) Wait(ctx context.Context, id string, interval time.Duration, onUpdate func(*messages.JobStatus)) (*messages.JobStatus, error) {
	return c.JobWait(ctx, id, interval, onUpdate)
}

// Cancel is JobCancel.
//
// Deprecated: use client.Client.JobCancel.
func (c *Client) Cancel(ctx context.Context, id string, opts ...CancelOption) (*messages.JobStatus, error) {
	return c.JobCancel(ctx, id, opts...)
}

// Pause is JobPause.
//
// Deprecated: use client.Client.JobPause.
func (c *Client) Pause(ctx context.Context, id string) (*messages.JobStatus, error) {
	return c.JobPause(ctx, id)
}

// Resume is JobResume.
//
// Deprecated: use client.Client.JobResume.
func (c *Client) Resume(ctx context.Context, id string) (*messages.JobStatus, error) {
	return c.JobResume(ctx, id)
}

// Prune is JobPrune.
//
// Deprecated: use client.Client.JobPrune.
func (c *Client) Prune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	return c.JobPrune(ctx, req)
}

// PausePool is PoolPause.
//
// Deprecated: use client.Client.PoolPause.
func (c *Client) PausePool(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return c.PoolPause(ctx, pool)
}

// ResumePool is PoolResume.
//
// Deprecated: use client.Client.PoolResume.
func (c *Client) ResumePool(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return c.PoolResume(ctx, pool)
}

// Schedules is ScheduleList.
//
// Deprecated: use client.Client.ScheduleList.
func (c *Client) Schedules(ctx context.Context) ([]messages.Schedule, error) {
	return c.ScheduleList(ctx)
}

// Schedule is ScheduleGet.
//
// Deprecated: use client.Client.ScheduleGet.
func (c *Client) Schedule(ctx context.Context, name string) (*messages.Schedule, error) {
	return c.ScheduleGet(ctx, name)
}

// PauseJob is JobPause.
//
// Deprecated: use Coordinator.JobPause.
func (c *Coordinator) PauseJob(ctx context.Context, id string) (*messages.JobStatus, error) {
	return c.JobPause(ctx, id)
}

// ResumeJob is JobResume.
//
// Deprecated: use Coordinator.JobResume.
func (c *Coordinator) ResumeJob(ctx context.Context, id string) (*messages.JobStatus, error) {
	return c.JobResume(ctx, id)
}

// PausePool is PoolPause.
//
// Deprecated: use Coordinator.PoolPause.
func (c *Coordinator) PausePool(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return c.PoolPause(ctx, pool)
}

// ResumePool is PoolResume.
//
// Deprecated: use Coordinator.PoolResume.
func (c *Coordinator) ResumePool(ctx context.Context, pool string) (*messages.PoolPauseReply, error) {
	return c.PoolResume(ctx, pool)
}

// Cancel is JobCancel.
//
// Deprecated: use Coordinator.JobCancel.
func (c *Coordinator) Cancel(ctx context.Context, id string, opts ...CancelOption) (*messages.JobStatus, error) {
	return c.JobCancel(ctx, id, opts...)
}

// Prune deletes the records of jobs that finished at least olderThan ago;
// with dryRun it only counts them.
//
// Deprecated: use Coordinator.JobPrune, which takes the API's request.
func (c *Coordinator) Prune(ctx context.Context, olderThan time.Duration, dryRun bool) (RetentionStats, error) {
	return c.retention.Prune(ctx, olderThan, dryRun)
}
