package itemrun

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An agent whose look for the pool's park stream goes unanswered at its
// start (here: the request is refused, which the server says to no one, so
// it waits out the request's timeout, as one to a cluster still electing
// its leaders does) runs its items all the same instead of stopping. An
// agent stopped this way once left a 3-node test fleet with no agent, and
// its job with nothing done.
func TestAgentStartsWhenTheParkStreamGoesUnanswered(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t,
		fleettest.WithConfig(func(o *server.Options) {
			o.Users = append(o.Users,
				&server.User{Username: "admin", Password: "admin"},
				&server.User{Username: "agent", Password: "agent", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.INFO." + testNames.ParkStream(messages.DefaultPool)}},
				}})
		}),
		fleettest.WithConnectOptions(nats.UserInfo("admin", "admin")))
	ctx := testCtx(t, 15*time.Second)
	prov := provision.Config{DLQMaxBytes: 1 << 20}
	runCoordinator(t, ctx, srv.Connect(t), coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 20 * time.Millisecond})
	a := New(srv.Connect(t, nats.UserInfo("agent", "agent")),
		testhooks.WithAgent(Config{Name: "a", ShutdownTimeout: 5 * time.Second, ParkAfter: time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t))}, testhooks.Agent{Provision: prov})).HandleBuiltins()
	defer runAgent(t, ctx, a)()

	cl, err := client.New(srv.Connect(t), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, []byte(`{"id": "j", "items": [1, 2, 3], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	st, err := cl.JobWait(ctx, "j", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 3, st.Succeeded)
	require.False(t, a.parking.Load(), "not known to exist")
}
