package jobrun

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A job with not_before 3 s ahead is scheduled, stays so across a
// coordinator restart, and starts no earlier than its time; then it runs
// to the end.
func TestNotBeforeHoldsAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	a := startEchoAgent(t, srv)
	defer a.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()

	submitted := time.Now()
	_, err = cl.Submit(ctx, []byte(`{"id":"later","not_before":"3s","items":[{"id":"a"},{"id":"b"}],"agent_template":[{"handler":"echo"}]}`))
	require.NoError(t, err)
	var st *messages.JobStatus
	require.Eventually(t, func() bool {
		st, err = cl.Status(ctx, "later")
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, messages.StateScheduled, st.State)
	p.stop(t)

	_, p = startCoord(t, srv, Config{})
	defer p.stop(t)
	st, err = cl.Status(ctx, "later")
	require.NoError(t, err)
	if time.Since(submitted) < 2500*time.Millisecond {
		require.Equal(t, messages.StateScheduled, st.State, "held after the restart")
	}
	st = waitStatus(t, cl, "later", func(st *messages.JobStatus) bool { return messages.TerminalState(st.State) })
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 2, st.Succeeded)
	require.NotNil(t, st.StartedAt)
	require.False(t, st.StartedAt.Before(submitted.Add(3*time.Second)), "started %v after submission", st.StartedAt.Sub(submitted))
}

func TestNotBeforeCancelWhileScheduled(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cl.Submit(ctx, []byte(`{"id":"much-later","not_before":"2099-01-01T00:00:00Z","items":[{"id":"a"}],"agent_template":[{"handler":"echo"}]}`))
	require.NoError(t, err)
	waitStatus(t, cl, "much-later", func(st *messages.JobStatus) bool { return st.State == messages.StateScheduled })
	st, err := cl.Cancel(ctx, "much-later")
	require.NoError(t, err)
	require.Equal(t, messages.StateCancelled, st.State)
}

func waitStatus(t *testing.T, cl *Client, id string, ok func(*messages.JobStatus) bool) *messages.JobStatus {
	t.Helper()
	var st *messages.JobStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = cl.Status(context.Background(), id)
		return err == nil && ok(st)
	}, 30*time.Second, 20*time.Millisecond)
	return st
}
