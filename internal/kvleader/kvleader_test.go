package kvleader_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

// ReadOn ends a read at its bound, goes on while the consumer counts
// messages pending, and otherwise asks the leader whether one remains up to
// the bound.
func TestReadOn(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	ctx := context.Background()
	js := srv.JS()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	for _, subj := range []string{"s.a", "s.b", "s.a", "s.b", "s.a"} { // 1..5
		_, err := js.Publish(ctx, subj, nil)
		require.NoError(t, err)
	}
	require.NoError(t, s.DeleteMsg(ctx, 5))
	md := func(seq, pending uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: seq}, NumPending: pending}
	}
	tests := []struct {
		name    string
		subject string
		md      *jetstream.MsgMetadata
		bound   uint64
		want    bool
	}{
		{"at the bound", "s.a", md(3, 7), 3, false},
		{"past the bound", "s.a", md(4, 7), 3, false},
		{"pending counted", "s.a", md(1, 1), 3, true},
		{"none pending but the leader holds one", "s.a", md(1, 0), 3, true},
		{"none pending, the next is past the bound", "s.a", md(1, 0), 2, false},
		{"none pending, the rest deleted", "s.a", md(3, 0), 5, false},
		{"a filter", "s.*", md(3, 0), 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kvleader.ReadOn(ctx, js, "S", tt.subject, tt.md, tt.bound)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// serve answers api as the servers of a stream's group do for a requester
// connected to a full node: a replica that believes the group has no
// leader (the full node drops its leader's heartbeats) answers first with
// replica, from its own copy; the leader, when leader is not nil, answers
// after it with leader.
func serve(t *testing.T, srv *natstest.Server, api string, replica, leader []byte) {
	t.Helper()
	replicaConn, leaderConn := srv.Connect(t), srv.Connect(t)
	answered := make(chan struct{}, 16)
	_, err := replicaConn.Subscribe(api, func(m *nats.Msg) {
		_ = m.Respond(replica)
		_ = replicaConn.Flush() // at the server before the leader answers
		answered <- struct{}{}
	})
	require.NoError(t, err)
	if leader != nil {
		_, err = leaderConn.Subscribe(api, func(m *nats.Msg) {
			<-answered
			_ = m.Respond(leader)
		})
		require.NoError(t, err)
	}
	require.NoError(t, replicaConn.Flush())
	require.NoError(t, leaderConn.Flush())
}

// A stream info request that a replica without a leader answers first
// gets the leader's answer: the replica's last sequence is the one it held
// when its node filled.
func TestStreamInfoTakesTheLeadersAnswer(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js, err := jetstream.NewWithAPIPrefix(srv.Connect(t), "FAKE.API")
	require.NoError(t, err)
	serve(t, srv, "FAKE.API.STREAM.INFO.S",
		[]byte(`{"config":{"name":"S"},"state":{"last_seq":6},"cluster":{"name":"c","replicas":[{"name":"n2","current":true}]}}`),
		[]byte(`{"config":{"name":"S"},"state":{"last_seq":47},"cluster":{"name":"c","leader":"n1","replicas":[{"name":"n2","lag":41}]}}`))
	// jetstream's own read takes the first answer.
	s, err := js.Stream(context.Background(), "S")
	require.NoError(t, err)
	require.EqualValues(t, 6, s.CachedInfo().State.LastSeq, "the replica's answer came first")
	require.False(t, kvleader.Led(s.CachedInfo()))

	info, err := kvleader.StreamInfo(context.Background(), js, "S")
	require.NoError(t, err)
	require.EqualValues(t, 47, info.State.LastSeq)
	require.Equal(t, "n1", info.Cluster.Leader)
}

// With no leader at all (an election under way) StreamInfo returns the
// answer it has once leaderGrace has passed.
func TestStreamInfoWithoutALeader(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js, err := jetstream.NewWithAPIPrefix(srv.Connect(t), "FAKE.API")
	require.NoError(t, err)
	serve(t, srv, "FAKE.API.STREAM.INFO.S", []byte(`{"config":{"name":"S"},"state":{"last_seq":6},"cluster":{"name":"c"}}`), nil)
	info, err := kvleader.StreamInfo(context.Background(), js, "S")
	require.NoError(t, err)
	require.EqualValues(t, 6, info.State.LastSeq)
	require.False(t, kvleader.Led(info))
}

// A message get that a replica without a leader answers first with
// "temporarily unavailable" gets the leader's answer: connected to a full
// node, every read of the leader's failed so before.
func TestStoredAfterTakesTheLeadersAnswer(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js, err := jetstream.NewWithAPIPrefix(srv.Connect(t), "FAKE.API")
	require.NoError(t, err)
	serve(t, srv, "FAKE.API.STREAM.MSG.GET.S",
		[]byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`),
		[]byte(`{"message":{"subject":"s.a","seq":40,"time":"2026-11-29T06:00:00Z"}}`))
	more, err := kvleader.StoredAfter(context.Background(), js, "S", "s.>", 35, 47)
	require.NoError(t, err)
	require.True(t, more)
}

// LastStored is the last sequence on a subject, 0 for none; a replica
// without a leader that answers first does not make it fail.
func TestLastStored(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	ctx := context.Background()
	js := srv.JS()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	for _, subj := range []string{"s.a", "s.b", "s.a"} {
		_, err := js.Publish(ctx, subj, nil)
		require.NoError(t, err)
	}
	seq, err := kvleader.LastStored(ctx, js, "S", "s.a")
	require.NoError(t, err)
	require.EqualValues(t, 3, seq)
	seq, err = kvleader.LastStored(ctx, js, "S", "s.none")
	require.NoError(t, err)
	require.Zero(t, seq)

	fake, err := jetstream.NewWithAPIPrefix(srv.Connect(t), "FAKE.API")
	require.NoError(t, err)
	serve(t, srv, "FAKE.API.STREAM.MSG.GET.S",
		[]byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`),
		[]byte(`{"message":{"subject":"s.a","seq":47,"time":"2026-11-29T06:00:00Z"}}`))
	seq, err = kvleader.LastStored(ctx, fake, "S", "s.a")
	require.NoError(t, err)
	require.EqualValues(t, 47, seq)
}
