package api

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// fakeJobs answers as its fields say; the API's logic needs no server.
type fakeJobs struct {
	Jobs // methods a test does not set panic

	cancel   func(id string, kill bool) (*messages.JobStatus, error)
	accepted bool
	teams    map[string][2]string
	list     messages.ListReply
}

func (f *fakeJobs) Cancel(_ context.Context, id string, kill bool) (*messages.JobStatus, error) {
	return f.cancel(id, kill)
}

func (f *fakeJobs) Accepted(context.Context, string) bool { return f.accepted }

func (f *fakeJobs) Teams(_ context.Context, id string) (string, string, error) {
	t, ok := f.teams[id]
	if !ok {
		return "", "", fmt.Errorf("reading %s: %w", id, ErrNoJob)
	}
	return t[0], t[1], nil
}

func (f *fakeJobs) List(context.Context, messages.ListRequest) (messages.ListReply, error) {
	return f.list, nil
}

// jobs.cancel maps the face's sentinels to replies, and asks again once a
// job the intake still held is accepted.
func TestCancelReplies(t *testing.T) {
	ended := &messages.JobStatus{ID: "j", State: messages.StateSucceeded}
	tests := []struct {
		name     string
		data     string
		cancel   func(calls int) (*messages.JobStatus, error)
		accepted bool
		want     string // the reply's code, "" for none
		calls    int
	}{
		{name: "no job id", data: `{}`, want: messages.CodeBadRequest},
		{name: "not a job id", data: `{"job_id":"a.b"}`, want: messages.CodeBadRequest},
		{name: "cancelled", data: `{"job_id":"j"}`, calls: 1,
			cancel: func(int) (*messages.JobStatus, error) { return &messages.JobStatus{ID: "j"}, nil }},
		{name: "no such job", data: `{"job_id":"j"}`, want: messages.CodeNotFound, calls: 1,
			cancel: func(int) (*messages.JobStatus, error) { return nil, ErrNoJob }},
		{name: "accepted meanwhile", data: `{"job_id":"j"}`, accepted: true, calls: 2,
			cancel: func(n int) (*messages.JobStatus, error) {
				if n == 1 {
					return nil, fmt.Errorf("wrapped: %w", ErrNoJob)
				}
				return &messages.JobStatus{ID: "j"}, nil
			}},
		{name: "ended", data: `{"job_id":"j"}`, want: messages.CodeConflict, calls: 1,
			cancel: func(int) (*messages.JobStatus, error) { return ended, ErrJobFinished }},
		{name: "other error", data: `{"job_id":"j"}`, want: messages.CodeInternal, calls: 1,
			cancel: func(int) (*messages.JobStatus, error) { return nil, errors.New("boom") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			f := &fakeJobs{accepted: tt.accepted, cancel: func(string, bool) (*messages.JobStatus, error) {
				calls++
				return tt.cancel(calls)
			}}
			_, e := jobsAPI{jobs: f}.cancel(context.Background(), []byte(tt.data))
			if tt.want == "" {
				require.Nil(t, e)
			} else {
				require.NotNil(t, e)
				require.Equal(t, tt.want, e.Code, e.Message)
			}
			require.Equal(t, tt.calls, calls)
		})
	}
}

// On a team's subjects a job of another team, of none, or no job is
// "not found", and jobs.list shows the team's jobs only.
func TestTeamSeesItsOwnJobsOnly(t *testing.T) {
	f := &fakeJobs{
		teams: map[string][2]string{"mine": {"red", "red"}, "specs": {"", "red"}, "theirs": {"blue", "blue"}, "none": {"", ""}},
		list: messages.ListReply{Total: 3, Jobs: []messages.JobStatus{
			{ID: "mine", Team: "red", State: messages.StateRunning}, {ID: "theirs", Team: "blue"}, {ID: "none"},
		}},
		cancel: func(id string, _ bool) (*messages.JobStatus, error) { return &messages.JobStatus{ID: id}, nil },
	}
	e := Endpoints{Jobs: f, Teams: map[string][]string{"red": {"default"}}}
	call := e.Team(e.All())
	ctx := context.Background()
	for id, want := range map[string]string{"mine": "", "specs": "", "theirs": messages.CodeNotFound, "none": messages.CodeNotFound, "gone": messages.CodeNotFound} {
		_, ae := call(ctx, "red", messages.EndpointJobsCancel, []byte(`{"job_id":"`+id+`"}`))
		if want == "" {
			require.Nil(t, ae, id)
			continue
		}
		require.NotNil(t, ae, id)
		require.Equal(t, want, ae.Code, id)
	}
	_, ae := call(ctx, "green", messages.EndpointJobsCancel, []byte(`{"job_id":"mine"}`))
	require.Equal(t, messages.CodeBadRequest, ae.Code, "a team the coordinator does not know")

	reply, ae := call(ctx, "red", messages.EndpointJobsList, nil)
	require.Nil(t, ae)
	lr := reply.(messages.ListReply)
	require.Equal(t, 1, lr.Total)
	require.Equal(t, "mine", lr.Jobs[0].ID)
	require.Equal(t, map[string]int{messages.StateRunning: 1}, lr.States)

	require.Nil(t, Endpoints{Jobs: f}.Team(nil), "no teams: no team subjects")
}
