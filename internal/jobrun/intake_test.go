package jobrun

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// waitState waits until job id is in state.
func waitState(t *testing.T, cl *Client, id, state string) *messages.JobStatus {
	t.Helper()
	var st *messages.JobStatus
	fleettest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if st, err = cl.Status(context.Background(), id); err != nil {
			return err
		}
		if st.State != state {
			return errors.New("state " + st.State)
		}
		return nil
	})
	return st
}

// A coordinator that dies while expanding a durable submission (out of
// memory, say) would die again on it after every restart, since the
// submission is acknowledged only once accepted. After IntakeMaxDeliveries
// deliveries it is rejected with the reason instead, and its id can be
// used again.
func TestIntakeRejectsWhatKeepsKillingTheCoordinator(t *testing.T) {
	old := intakeAckWait
	intakeAckWait = time.Second // the dead coordinator's delivery comes back quickly
	t.Cleanup(func() { intakeAckWait = old })
	srv := fleettest.RunServer(t)

	// The first coordinator "dies" in the middle of the expansion.
	c1, err := New(srv.Connect(t), Config{Provision: Provision(testProv), IntakeMaxDeliveries: 1})
	require.NoError(t, err)
	expanding, release := make(chan struct{}), make(chan struct{})
	c1.beforeCount = func(string) { close(expanding); <-release }
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { _ = c1.Run(ctx1); close(done1) }()
	t.Cleanup(func() { close(release); <-done1 })
	<-c1.Ready()
	_, err = srv.JS().Publish(context.Background(), "fleet.jobs.submit", []byte(`{"id": "oom", "items": [1, 2], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	<-expanding
	c1.nc.Close() // as dead as a killed process, to the server
	cancel1()

	_, p2 := startCoord(t, srv, Config{IntakeMaxDeliveries: 1})
	defer p2.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	st := waitState(t, cl, "oom", messages.StateRejected)
	require.Len(t, st.Problems, 1)
	require.Equal(t, "not accepted after 1 attempts: the coordinator stopped or died while accepting it (out of memory?)", st.Problems[0].Message)

	// The id is free again: the same job through the API is accepted.
	reply, err := cl.Submit(context.Background(), []byte(`{"id": "oom", "items": [1, 2], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	require.False(t, reply.Existing)
	waitState(t, cl, "oom", messages.StateRunning)
}

// A panic while accepting a submission (a bug some spec found) counts as a
// failed attempt: the submission ends rejected with it, the coordinator
// goes on.
func TestIntakeSurvivesAPanic(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	c, err := New(srv.Connect(t), Config{Provision: Provision(testProv), StatusInterval: 20 * time.Millisecond, IntakeMaxDeliveries: 2})
	require.NoError(t, err)
	c.beforeCount = func(job string) {
		if job == "bomb" {
			panic("boom")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-c.Ready()
	defer func() { cancel(); require.NoError(t, <-done) }()

	_, err = srv.JS().Publish(context.Background(), "fleet.jobs.submit", []byte(`{"id": "bomb", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	st := waitState(t, cl, "bomb", messages.StateRejected)
	require.Equal(t, "not accepted after 2 attempts: internal error: boom", st.Problems[0].Message)
	_, err = srv.JS().Publish(context.Background(), "fleet.jobs.submit", []byte(`{"id": "fine", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	waitState(t, cl, "fine", messages.StateRunning)
}
