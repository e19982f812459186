package kvleader_test

import (
	"context"
	"testing"

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
