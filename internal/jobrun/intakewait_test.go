package jobrun

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A cancel or pause of a job whose submission is stored but not yet taken
// in (here: held back by MaxOpenJobs) waits for the intake instead of
// answering "no job"; while the intake holds nothing, a job nobody
// submitted is not found at once.
func TestCancelAndPauseWaitForTheIntake(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{MaxOpenJobs: 1})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := func(id string) []byte {
		return []byte(`{"id": "` + id + `", "pool": "idle", "items": [1], "agent_template": [{"handler": "noop"}]}`)
	}
	_, err = cl.Submit(ctx, spec("open"))
	require.NoError(t, err)
	waitState(t, cl, "open", messages.StateRunning)
	start := time.Now()
	_, err = cl.Cancel(ctx, "never-submitted")
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeNotFound, ae.Code)
	require.Less(t, time.Since(start), intakeWait, "the intake holds nothing: not found without the wait")

	for _, id := range []string{"to-pause", "to-cancel"} {
		_, err = srv.JS().Publish(ctx, "fleet.jobs.submit", spec(id))
		require.NoError(t, err)
	}

	type answer struct {
		st  *messages.JobStatus
		err error
	}
	paused, cancelled := make(chan answer, 1), make(chan answer, 1)
	go func() { st, err := cl.Pause(ctx, "to-pause"); paused <- answer{st, err} }()
	// The intake holds both submissions until "open" ends; then it takes
	// in "to-pause", which is paused, and ends it so that "to-cancel" is
	// taken in too.
	_, err = cl.Cancel(ctx, "open")
	require.NoError(t, err)
	a := <-paused
	require.NoError(t, a.err)
	require.Equal(t, messages.StatePaused, a.st.State)
	go func() { st, err := cl.Cancel(ctx, "to-cancel"); cancelled <- answer{st, err} }()
	_, err = cl.Cancel(ctx, "to-pause")
	require.NoError(t, err)
	a = <-cancelled
	require.NoError(t, a.err)
	require.Equal(t, messages.StateCancelled, a.st.State)
}
