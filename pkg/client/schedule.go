package client

import (
	"context"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ScheduleAdd creates a schedule (schedules.add).
func (c *Client) ScheduleAdd(ctx context.Context, spec messages.ScheduleSpec) (*messages.Schedule, error) {
	r, err := call[messages.ScheduleReply](ctx, c, messages.EndpointSchedulesAdd, spec)
	if err != nil {
		return nil, err
	}
	return r.Schedule, nil
}

// ScheduleList lists the schedules (schedules.list), by name.
func (c *Client) ScheduleList(ctx context.Context) ([]messages.Schedule, error) {
	r, err := call[messages.ScheduleListReply](ctx, c, messages.EndpointSchedulesList, struct{}{})
	if err != nil {
		return nil, err
	}
	return r.Schedules, nil
}

// ScheduleGet returns one schedule with its next run, last runs and skipped
// ticks (schedules.get).
func (c *Client) ScheduleGet(ctx context.Context, name string) (*messages.Schedule, error) {
	return c.scheduleCall(ctx, messages.EndpointSchedulesGet, name)
}

// SchedulePause stops a schedule's ticks from firing (schedules.pause).
func (c *Client) SchedulePause(ctx context.Context, name string) (*messages.Schedule, error) {
	return c.scheduleCall(ctx, messages.EndpointSchedulesPause, name)
}

// ScheduleResume lets a paused schedule's ticks fire again, from the
// next one (schedules.resume).
func (c *Client) ScheduleResume(ctx context.Context, name string) (*messages.Schedule, error) {
	return c.scheduleCall(ctx, messages.EndpointSchedulesResume, name)
}

// ScheduleTrigger starts a run of the schedule now and returns its job id
// (schedules.trigger).
func (c *Client) ScheduleTrigger(ctx context.Context, name string) (string, error) {
	r, err := call[messages.ScheduleReply](ctx, c, messages.EndpointSchedulesTrigger, messages.ScheduleRequest{Name: name})
	if err != nil {
		return "", err
	}
	return r.JobID, nil
}

// ScheduleRemove deletes a schedule (schedules.rm); its runs' jobs stay.
func (c *Client) ScheduleRemove(ctx context.Context, name string) error {
	_, err := call[messages.ScheduleReply](ctx, c, messages.EndpointSchedulesRemove, messages.ScheduleRequest{Name: name})
	return err
}

func (c *Client) scheduleCall(ctx context.Context, endpoint, name string) (*messages.Schedule, error) {
	r, err := call[messages.ScheduleReply](ctx, c, endpoint, messages.ScheduleRequest{Name: name})
	if err != nil {
		return nil, err
	}
	return r.Schedule, nil
}
