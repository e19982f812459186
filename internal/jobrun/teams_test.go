package jobrun

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A team's job runs on its team's pools only: a group named after a pool
// of another team is not routed there (it stays on the job's pool), one
// named after a pool of the team is. Its record and status name the team.
func TestTeamJobsRouteToTheTeamsPoolsOnly(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *Coordinator
	startCoordConfig(t, srv, Config{Teams: map[string][]string{"red": {"ra", "rb"}, "blue": {"other"}}},
		func(co *Coordinator) { c = co })
	for _, p := range []string{"ra", "rb", "other"} {
		_, err := provision.EnsurePool(ctx, srv.JS(), messages.MustNames(""), p, testProv)
		require.NoError(t, err)
	}
	red, err := client.New(srv.Connect(t), "", client.WithTeam("red"))
	require.NoError(t, err)
	_, err = red.JobSubmit(ctx, []byte(`{"id": "split", "pool": "ra", "group_by": "${item.g}",
		"items": [{"id": "1", "g": "rb"}, {"id": "2", "g": "other"}], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, err := c.store.get(ctx, "split")
		return err == nil && rec.Spec != nil
	}, 10*time.Second, 10*time.Millisecond)
	rec, err := c.store.get(ctx, "split")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"rb": "rb"}, rec.Routes, "blue's pool is not red's to use")
	require.Equal(t, "red", rec.Status.Team)
	require.Equal(t, "red", rec.Spec.Team)
	st, err := red.JobStatus(ctx, "split")
	require.NoError(t, err)
	require.Equal(t, "red", st.Team)
}
