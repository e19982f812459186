package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestKillSwitch(t *testing.T) {
	k := newKillSwitch()
	a1, doneA1 := k.track(t.Context(), "a")
	a2, doneA2 := k.track(t.Context(), "a")
	b, doneB := k.track(t.Context(), "b")
	defer doneB()

	doneA2() // finished before the kill: not counted, not killed
	require.False(t, killed(a2))
	require.Equal(t, 1, k.kill("a"))
	require.True(t, killed(a1))
	require.ErrorIs(t, context.Cause(a1), ErrJobKilled)
	require.NoError(t, b.Err(), "another job's item runs on")
	doneA1()
	require.Empty(t, k.running["a"], "nothing left tracked")
	require.Zero(t, k.kill("a"))

	// A shutdown is not a kill.
	ctx, cancel := context.WithCancel(t.Context())
	c, doneC := k.track(ctx, "c")
	defer doneC()
	cancel()
	require.Error(t, c.Err())
	require.False(t, killed(c))
}

func TestMapEndedKill(t *testing.T) {
	event := func(data any) []byte {
		raw, err := json.Marshal(data)
		require.NoError(t, err)
		b, err := json.Marshal(messages.Event{Type: "MapPhaseEnded", JobID: "j", Data: raw})
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		body []byte
		want bool
	}{
		{"kill", event(messages.MapPhaseEndedEvent{State: messages.StateCancelled, Reason: messages.CompletionCancelled, Kill: true}), true},
		{"plain cancel", event(messages.MapPhaseEndedEvent{State: messages.StateCancelled, Reason: messages.CompletionCancelled}), false},
		{"not json", []byte("{"), false},
		{"no data", []byte(`{"type": "MapPhaseEnded"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, mapEndedKill(tt.body))
		})
	}
}
