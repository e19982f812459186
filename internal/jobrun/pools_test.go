package jobrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// At MaxOpenJobs open jobs the API refuses a submission with code
// too_many and says why; a durable submission waits in the jobs stream
// and is accepted once a job ends.
func TestOpenJobsLimit(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{MaxOpenJobs: 2})
	defer p.stop(t)
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	for _, id := range []string{"one", "two"} {
		_, err := cl.Submit(ctx, []byte(`{"id": "`+id+`", "pool": "idle", "items": [1], "agent_template": [{"handler": "noop"}]}`))
		require.NoError(t, err)
		waitState(t, cl, id, messages.StateRunning)
	}
	ae := submitErr(t, cl, `{"id": "three", "pool": "idle", "items": [1], "agent_template": [{"handler": "noop"}]}`)
	require.Equal(t, messages.CodeTooMany, ae.Code)
	require.Contains(t, ae.Message, "2 jobs are open (pending or running); the limit is 2 (--max-open-jobs)")
	// An existing job's resubmission is still answered.
	reply, err := cl.Submit(ctx, []byte(`{"id": "one", "pool": "idle", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	require.True(t, reply.Existing)

	_, err = srv.JS().Publish(ctx, "fleet.jobs.submit", []byte(`{"id": "queued", "pool": "idle", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	_, err = cl.Status(ctx, "queued")
	require.Error(t, err, "not accepted while two jobs are open")
	_, err = cl.Cancel(ctx, "one")
	require.NoError(t, err)
	waitState(t, cl, "queued", messages.StateRunning)
}

// A job may name a pool the operator configured, or an existing one, or
// a new one while the work stream has fewer than MaxPools pools; any
// other is refused naming the field, through the API and the durable
// intake alike. With MaxPools negative only the configured pools are.
func TestPoolLimit(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{MaxPools: 2, Pools: []string{"conf"}})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	ctx := context.Background()
	spec := func(id, pool string) []byte {
		return []byte(`{"id": "` + id + `", "pool": "` + pool + `", "items": [1], "agent_template": [{"handler": "noop"}]}`)
	}
	for _, pool := range []string{"a", "b"} {
		_, err := cl.Submit(ctx, spec("job-"+pool, pool))
		require.NoError(t, err)
		waitState(t, cl, "job-"+pool, messages.StateRunning)
	}
	ae := submitErr(t, cl, string(spec("job-c", "c")))
	require.Equal(t, messages.CodeInvalid, ae.Code)
	require.Equal(t, "pool", ae.Field)
	require.Contains(t, ae.Message, `pool "c" would be a new pool; the work stream has 2 already (a, b…), the limit is 2 (--max-pools)`)
	for _, id := range []string{"job-a2", "job-conf"} {
		pool := map[string]string{"job-a2": "a", "job-conf": "conf"}[id]
		_, err := cl.Submit(ctx, spec(id, pool))
		require.NoError(t, err, "an existing or configured pool")
		waitState(t, cl, id, messages.StateRunning)
	}
	_, err = srv.JS().Publish(ctx, "fleet.jobs.submit", spec("durable-d", "d"))
	require.NoError(t, err)
	st := waitState(t, cl, "durable-d", messages.StateRejected)
	require.Equal(t, "pool", st.Problems[0].Field)
	p.stop(t)

	_, p2 := startCoord(t, srv, Config{MaxPools: -1, Pools: []string{"conf"}})
	defer p2.stop(t)
	ae = submitErr(t, cl, string(spec("job-a3", "a")))
	require.Equal(t, "pool", ae.Field)
	require.Contains(t, ae.Message, `pool "a" is not one of the configured pools (conf)`)

	require.ErrorContains(t, Config{MaxPools: -1}.WithDefaults().Validate(), "max_pools")
	require.ErrorContains(t, Config{Pools: []string{"no.dots"}}.WithDefaults().Validate(), "pools[0]")
}
