package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestKillSwitch(t *testing.T) {
	k := newKillSwitch()
	a1 := k.track(t.Context(), "a")
	a2 := k.track(t.Context(), "a")
	b := k.track(t.Context(), "b")
	defer k.done(b)

	k.done(a2) // finished before the kill: not counted, not killed
	require.False(t, killed(a2))
	require.Equal(t, 1, k.kill("a"))
	require.True(t, killed(a1))
	require.ErrorIs(t, context.Cause(a1), ErrJobKilled)
	require.NoError(t, b.Err(), "another job's item runs on")
	k.done(a1)
	require.Empty(t, k.running["a"], "nothing left tracked")
	require.Zero(t, k.kill("a"))

	// A shutdown is not a kill.
	ctx, cancel := context.WithCancel(t.Context())
	c := k.track(ctx, "c")
	defer k.done(c)
	cancel()
	require.Error(t, c.Err())
	require.False(t, killed(c))
}

// A killContext behaves as context.WithCancelCause whether its Done was
// asked for before the kill, after it, or never.
func TestKillContextIsLazyWithCancelCause(t *testing.T) {
	k := newKillSwitch()

	waiting := k.track(t.Context(), "j") // a step that waits on its context
	done := waiting.Done()
	require.NotNil(t, waiting.inner, "Done made the real context")
	quick := k.track(t.Context(), "j") // a quick handler: never asks
	require.Nil(t, quick.inner, "no context made per item until asked")
	require.NoError(t, quick.Err())

	require.Equal(t, 2, k.kill("j"))
	select {
	case <-done:
	default:
		t.Fatal("the kill did not close Done")
	}
	for _, c := range []*killContext{waiting, quick} {
		require.ErrorIs(t, c.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(c), ErrJobKilled)
		require.True(t, killed(c))
	}
	<-quick.Done() // made after the kill: closed at once
	k.done(waiting)
	k.done(quick)
	require.ErrorIs(t, context.Cause(quick), ErrJobKilled, "release keeps the first cause")

	// A parent that ended first keeps its own cause, asked or not.
	parent, cancel := context.WithCancelCause(t.Context())
	lazy := k.track(parent, "p")
	eager := k.track(parent, "p")
	eager.Done()
	shutdown := errors.New("shutting down")
	cancel(shutdown)
	k.kill("p")
	for _, c := range []*killContext{lazy, eager} {
		require.ErrorIs(t, context.Cause(c), shutdown)
		require.False(t, killed(c))
	}
	k.done(lazy)
	k.done(eager)
	require.Empty(t, k.running)

	// Released without a kill: plainly cancelled.
	r := k.track(t.Context(), "r")
	k.done(r)
	require.ErrorIs(t, r.Err(), context.Canceled)
	require.False(t, killed(r))
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
