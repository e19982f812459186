package dlq_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
)

// An agent under role keys of the previous release, which name no pool
// dead-letter subject (fleet.dlqin.<pool>.*), beside a coordinator that
// made the pool's dead-letter stream: the refused publish is heard at once
// and the entry goes to the DLQ stream's own subject, within a deadline
// far shorter than a publish's timeout (docs/deploy.md, "Upgrades").
func TestWriterFallsBackWhenThePoolSubjectIsRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t,
		natstest.WithConfig(func(o *server.Options) {
			o.Users = append(o.Users,
				&server.User{Username: "admin", Password: "admin"},
				&server.User{Username: "old", Password: "old", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"fleet.dlqin.>"}},
				}})
		}),
		natstest.WithConnectOptions(nats.UserInfo("admin", "admin")))
	require.NoError(t, provision.Ensure(testCtx(t, 30*time.Second), srv.JS(), names, provision.Config{DLQMaxBytes: 64 << 20}))
	_, err := provision.EnsurePool(testCtx(t, 30*time.Second), srv.JS(), names, "default", provision.Config{DLQMaxBytes: 64 << 20})
	require.NoError(t, err)

	nc := srv.Connect(t, nats.UserInfo("old", "old"))
	denials := natsconn.WatchDenials(nc)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	w := dlq.NewWriter(js, names, "default")
	w.Denials = denials
	for i := range 3 {
		// A publish to the refused subject would wait for the whole 3 s.
		require.NoError(t, w.Write(testCtx(t, 3*time.Second), entry("j1", i, "exit", "boom")))
	}
	s, err := srv.JS().Stream(testCtx(t, 10*time.Second), names.DLQStream())
	require.NoError(t, err)
	for i := range 3 {
		m, err := s.GetMsg(testCtx(t, 10*time.Second), uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, names.DLQSubject("default", "j1"), m.Subject, "entry %d", i)
	}
	info, err := s.Info(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 3, info.State.Msgs)
}
