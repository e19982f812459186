package natstest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRunServerRoundtrip(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := ctxT(t, 10*time.Second)
	js := srv.JS()

	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RT", Subjects: []string{"rt.>"}})
	require.NoError(t, err)
	for i := range 10 {
		_, err := js.Publish(ctx, "rt.x", fmt.Appendf(nil, "m%d", i))
		require.NoError(t, err)
	}

	// A consumer on a second connection reads them back in order.
	js2, err := jetstream.New(srv.Connect(t))
	require.NoError(t, err)
	cons, err := js2.CreateConsumer(ctx, "RT", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	i := 0
	for msg := range batch.Messages() {
		require.Equal(t, fmt.Sprintf("m%d", i), string(msg.Data()))
		require.NoError(t, msg.Ack())
		i++
	}
	require.NoError(t, batch.Error())
	require.Equal(t, 10, i)
	require.Contains(t, srv.URL(), "nats://127.0.0.1:")
}

func TestRestartKeepsFileStream(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := ctxT(t, 20*time.Second)
	url := srv.URL()

	_, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{
		Name: "DURABLE", Subjects: []string{"durable.>"}, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	for range 5 {
		_, err := srv.JS().Publish(ctx, "durable.a", []byte("x"))
		require.NoError(t, err)
	}

	srv.Restart(t)
	require.Equal(t, url, srv.URL(), "restart keeps the port")

	// The default connection reconnected; the stream and its messages are back.
	s, err := srv.JS().Stream(ctx, "DURABLE")
	require.NoError(t, err)
	require.EqualValues(t, 5, s.CachedInfo().State.Msgs)
	_, err = srv.JS().Publish(ctx, "durable.a", []byte("after restart"))
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, 6)
	require.NoError(t, err)
	require.Equal(t, "after restart", string(m.Data))
}

func TestWithStoreDir(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.RunServer(t, natstest.WithStoreDir(dir))
	require.Equal(t, dir, srv.StoreDir())
}

func TestClusterR3SurvivesNodeLoss(t *testing.T) {
	t.Parallel() // its own cluster; the package checks for leaks once, at its end
	c := natstest.RunCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	js := c.JS()

	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	leader := c.WaitForStreamLeader(t, "R3")
	require.GreaterOrEqual(t, leader, 0)

	// A publish in flight when its connection's node dies gets no PubAck:
	// like any JetStream producer, retry it with the same Nats-Msg-Id.
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			natstest.WaitFor(t, 20*time.Second, func() error {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, "r3.x", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publish(0, 20)

	// Move the stream leader away (fast), then stop it: the stream keeps a
	// quorum of 2 and publishes go on without an election timeout.
	newLeader, err := c.StepDownStreamLeader(ctx, "R3")
	require.NoError(t, err)
	require.NotEqual(t, leader, newLeader)
	c.StopNode(leader)
	require.Nil(t, c.Server(leader))
	publish(20, 40)

	// A read (on a fresh connection, through whichever node) sees them all.
	js2, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	s, err := js2.Stream(ctx, "R3")
	require.NoError(t, err)
	require.EqualValues(t, 40, s.CachedInfo().State.Msgs)
	last, err := s.GetLastMsgForSubject(ctx, "r3.x")
	require.NoError(t, err)
	require.Equal(t, "39", string(last.Data))

	// The node rejoins and catches up.
	c.RestartNode(t, leader)
	require.NotNil(t, c.Server(leader))
	c.WaitForStreamLeader(t, "R3") // every running replica current again
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !c.Server(leader).JetStreamIsStreamCurrent("$G", "R3") {
			return fmt.Errorf("node %s has not caught up on R3", c.NodeName(leader))
		}
		return nil
	})
	publish(40, 45)
	s, err = js.Stream(ctx, "R3")
	require.NoError(t, err)
	require.EqualValues(t, 45, s.CachedInfo().State.Msgs)
	require.Len(t, s.CachedInfo().Cluster.Replicas, 2) // leader + 2 replicas, all back
}

// A node cut off the cluster (WithPartitions) keeps its clients, whose
// JetStream writes then fail; the others go on; healed, it rejoins.
func TestCutNodeKeepsItsClientsButLosesTheCluster(t *testing.T) {
	t.Parallel() // its own cluster; the package checks for leaks once, at its end
	c := natstest.RunCluster(t, 3, natstest.WithPartitions(), natstest.WithConfig(func(o *server.Options) {
		o.Cluster.PingInterval = 250 * time.Millisecond
		o.Cluster.MaxPingsOut = 3
	}))
	ctx := ctxT(t, 90*time.Second)
	_, err := c.JS().CreateStream(ctx, jetstream.StreamConfig{
		Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	c.WaitForStreamLeader(t, "R3")
	onCut, err := jetstream.New(c.ConnectNode(t, 2))
	require.NoError(t, err)
	onOther, err := jetstream.New(c.ConnectNode(t, 0))
	require.NoError(t, err)
	publish := func(js jetstream.JetStream) error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "r3.x", nil)
		return err
	}
	require.NoError(t, publish(onCut))

	c.Cut(2)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if publish(onCut) == nil {
			return errors.New("a publish through the cut-off node still succeeds")
		}
		return nil
	})
	natstest.WaitFor(t, 30*time.Second, func() error { return publish(onOther) })

	c.Heal(2)
	natstest.WaitFor(t, 30*time.Second, func() error { return publish(onCut) })
}
