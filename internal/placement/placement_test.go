package placement

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
)

func TestStaleReplicas(t *testing.T) {
	tests := []struct {
		name string
		ci   *jetstream.ClusterInfo
		want map[string]bool
	}{
		{name: "no cluster", ci: nil},
		{name: "no leader", ci: &jetstream.ClusterInfo{Replicas: []*jetstream.PeerInfo{{Name: "n1", Active: time.Minute}}}},
		{name: "current replicas", ci: &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Current: true, Active: 100 * time.Millisecond}, {Name: "n2", Current: true},
		}}},
		{name: "behind, answering", ci: &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Lag: 40, Active: 300 * time.Millisecond},
		}}},
		{name: "silent (a full store)", ci: &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Current: true}, {Name: "n2", Lag: 900, Active: 6 * time.Second},
		}}, want: map[string]bool{"n2": true}},
		{name: "known offline", ci: &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Offline: true, Active: time.Minute},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, staleReplicas(tt.ci, DefaultStaleAfter))
		})
	}
}

// A durable consumer led from a node whose store is full delivers nothing
// stored after the node filled (its replica there applies nothing); the
// sweep steps it down, the node stands for no election, and the consumer,
// led from another node, delivers what was stored meanwhile.
func TestSweepMovesAConsumerOffAFullNode(t *testing.T) {
	const small = 24 << 20
	c := fleettest.RunCluster(t, 3, fleettest.WithConfig(func(o *server.Options) {
		if o.ServerName == "n2" {
			o.JetStreamMaxStore = small
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js := c.JS()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}, Replicas: 3})
	require.NoError(t, err)
	cons, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "agents", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	// The consumer led from n2, the stream from another node: what this
	// test moves is the consumer (a stream led from the full node is
	// TestStoreFullOneNodeOfThree's case, in internal/e2e).
	fleettest.WaitFor(t, time.Minute, func() error {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		si, err := s.Info(ictx)
		if err != nil {
			return err
		}
		if l := si.Cluster.Leader; l == "" || l == "n2" {
			_ = request(ictx, js, "STREAM.LEADER.STEPDOWN.WORK")
			return fmt.Errorf("stream led from %q", l)
		}
		info, err := cons.Info(ictx)
		if err != nil {
			return err
		}
		switch info.Cluster.Leader {
		case "n2":
			return nil
		case "":
			return errors.New("no leader")
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = request(sctx, js, "CONSUMER.LEADER.STEPDOWN.WORK.agents")
		return fmt.Errorf("led from %s", info.Cluster.Leader)
	})
	// n2 full: 1 MiB chunks into another R3 stream until it is past its limit.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Replicas: 3})
	require.NoError(t, err)
	blob := make([]byte, 1<<20)
	fleettest.WaitFor(t, time.Minute, func() error {
		jsz, err := c.Server(2).Jsz(&server.JSzOptions{})
		if err != nil {
			return err
		}
		if jsz.Store > small {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, _ = js.Publish(pctx, "filler", blob)
		return fmt.Errorf("n2 stores %d bytes", jsz.Store)
	})
	// Stored after n2 filled (the stream's leader, if on n2, steps down
	// at the first refusal).
	fleettest.WaitFor(t, time.Minute, func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "work.a", []byte("item"))
		return err
	})

	var moves []Move
	sw := NewSweeper(Config{JetStream: js, Streams: func() []string { return []string{"WORK"} }})
	fleettest.WaitFor(t, time.Minute, func() error {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		m, err := sw.Sweep(sctx)
		moves = append(moves, m...)
		if len(moves) == 0 {
			return fmt.Errorf("nothing moved yet (%v); %s", err, clusterView(ctx, js, cons))
		}
		return nil
	})
	require.Contains(t, moves, Move{Stream: "WORK", Consumer: "agents", From: "n2"})
	fleettest.WaitFor(t, time.Minute, func() error {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := cons.Info(ictx)
		if err != nil {
			return err
		}
		if l := info.Cluster.Leader; l == "" || l == "n2" {
			return fmt.Errorf("led from %q", l)
		}
		return nil
	})
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	require.NoError(t, err)
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		require.NoError(t, m.Ack())
	}
	require.Equal(t, []string{"item"}, got, "the item stored while n2 was full is delivered")
}

// clusterView describes who leads the WORK stream and its consumer and
// how each leader sees its replicas: what a failed wait reports.
func clusterView(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer) string {
	view := func(ci *jetstream.ClusterInfo) string {
		if ci == nil {
			return "no cluster info"
		}
		out := "leader " + ci.Leader
		for _, p := range ci.Replicas {
			out += fmt.Sprintf(", %s current=%t active=%s lag=%d offline=%t", p.Name, p.Current, p.Active, p.Lag, p.Offline)
		}
		return out
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, "WORK")
	if err != nil {
		return "stream: " + err.Error()
	}
	info, err := cons.Info(ictx)
	if err != nil {
		return "stream " + view(s.CachedInfo().Cluster) + "; consumer: " + err.Error()
	}
	return "stream " + view(s.CachedInfo().Cluster) + "; consumer " + view(info.Cluster)
}

func TestBehindReplicas(t *testing.T) {
	ci := &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
		{Name: "n1", Current: true},                         // current
		{Name: "n2", Lag: 900},                              // never heard since n0 was elected
		{Name: "n3", Lag: 2, Active: 10 * time.Millisecond}, // heard a moment ago, behind
		{Name: "n4", Offline: true},
	}}
	var names []string
	for _, p := range behindReplicas(ci) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"n2", "n3"}, names)
	require.Nil(t, behindReplicas(&jetstream.ClusterInfo{Replicas: ci.Replicas}), "no leader")
}

// A replica that stays behind for StaleAfter is stale, whether or not its
// leader hears from it now and then (a full node answers some heartbeats);
// one whose lag shrinks is catching up and starts its count anew.
func TestSweepCountsReplicasThatStayBehind(t *testing.T) {
	now := time.Unix(1000, 0)
	sw := &Sweeper{Now: func() time.Time { return now }}
	info := func(lag uint64, active time.Duration) *jetstream.ClusterInfo {
		return &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Current: true}, {Name: "n2", Lag: lag, Active: active},
		}}
	}
	steps := []struct {
		after  time.Duration
		ci     *jetstream.ClusterInfo
		stale  bool
		reason string
	}{
		{0, info(4, 0), false, "first seen behind"},
		{2 * time.Second, info(4, 300*time.Millisecond), false, "heard, still behind"},
		{2 * time.Second, info(3, 0), false, "caught up a little: counted anew"},
		{3 * time.Second, info(5, 100*time.Millisecond), false, "3 s behind since"},
		{2 * time.Second, info(5, 0), true, "5 s behind, never catching up"},
	}
	for _, st := range steps {
		now = now.Add(st.after)
		require.Equal(t, st.stale, sw.staleOf("WORK", st.ci)["n2"], st.reason)
	}
}

func TestMovable(t *testing.T) {
	ci := &jetstream.ClusterInfo{Leader: "n2", Replicas: []*jetstream.PeerInfo{{Name: "n0"}, {Name: "n1"}}}
	require.True(t, movable(ci, map[string]bool{"n2": true}), "n0 and n1 elect")
	require.False(t, movable(ci, map[string]bool{"n2": true, "n1": true}), "n0 alone is no quorum")
	require.False(t, movable(&jetstream.ClusterInfo{Leader: "n2"}, map[string]bool{"n2": true}), "one replica")
	led := &jetstream.ClusterInfo{Leader: "n0", Replicas: []*jetstream.PeerInfo{{Name: "n1"}, {Name: "n2"}}}
	require.True(t, movable(led, map[string]bool{"n2": true}), "the leader n0 and n1 are a quorum")
}

// A sweep that hears no leader's answer for a stream (the full node's own
// answer came first, naming no leader, and the leader's did not come) keeps
// what earlier sweeps saw of its replicas: it once dropped it, and a full
// node that answered every other sweep was never seen behind for
// StaleAfter in a row, so the coordinator's results reader stayed on it
// for minutes (TestStoreFullOneNodeOfThree).
func TestSweepKeepsAStreamItHeardNoLeaderFor(t *testing.T) {
	now := time.Unix(1000, 0)
	sw := &Sweeper{Now: func() time.Time { return now }}
	behind := &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{
		{Name: "n0", Current: true}, {Name: "n2", Lag: 49},
	}}
	// sweep is one sweep of FLEET_RESULTS: the leader's answer (ci), or
	// none (nil).
	sweep := func(ci *jetstream.ClusterInfo) bool {
		sw.touched = map[string]bool{}
		var own map[string]bool
		if ci != nil {
			own = sw.staleOf("FLEET_RESULTS", ci)
		} else {
			sw.keep("FLEET_RESULTS")
		}
		sw.forget()
		return own["n2"]
	}
	require.False(t, sweep(behind), "first seen behind")
	now = now.Add(5 * time.Second)
	require.False(t, sweep(nil), "no leader heard")
	now = now.Add(5 * time.Second)
	require.True(t, sweep(behind), "behind for 10 s, the sweep between heard no leader")
	// Another stream's records are not kept by this one's keep.
	sw.touched = map[string]bool{}
	sw.staleOf("FLEET_WORK", behind)
	sw.touched = map[string]bool{}
	sw.keep("FLEET_RESULTS")
	sw.forget()
	for key := range sw.behind {
		require.NotContains(t, key, "FLEET_WORK/", "a stream seen current (not behind) is forgotten")
	}
}
