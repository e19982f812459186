package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
)

// A local clock 2 minutes ahead of the server's learns the server's time
// from the stamps of messages that arrive: the greatest bound (the message
// delivered at once), not the stamps of messages that waited.
func TestServerLearnsTheOffset(t *testing.T) {
	server := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	local := clock.NewManual(server.Add(2 * time.Minute))
	s := clock.NewServer(local)
	require.Equal(t, local.Now(), s.Now(), "no observation: the local clock")

	s.Observe(server.Add(-30 * time.Second)) // a message that waited 30 s
	require.Equal(t, -2*time.Minute-30*time.Second, s.Offset())
	s.Observe(server.Add(-10 * time.Millisecond)) // one delivered at once
	require.Equal(t, -2*time.Minute-10*time.Millisecond, s.Offset())
	s.Observe(server.Add(-5 * time.Second)) // an older one changes nothing
	require.Equal(t, -2*time.Minute-10*time.Millisecond, s.Offset())
	require.Equal(t, server.Add(-10*time.Millisecond), s.Now())
	s.Observe(time.Time{})
	require.Equal(t, -2*time.Minute-10*time.Millisecond, s.Offset())
}

// A local clock set forward (an NTP step) is followed within two windows:
// the old, larger bound is forgotten.
func TestServerFollowsALocalClockSetForward(t *testing.T) {
	server := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	local := clock.NewManual(server.Add(-2 * time.Minute)) // 2 min behind
	s := clock.NewServer(local)
	s.Observe(server)
	require.Equal(t, 2*time.Minute, s.Offset())

	local.Advance(2 * time.Minute) // the local clock is set right
	for range 3 {
		local.Advance(clock.ServerWindow)
		server = server.Add(clock.ServerWindow)
		s.Observe(server)
	}
	require.Equal(t, time.Duration(0), s.Offset())
	require.Equal(t, server, s.Now())
}

func TestOffset(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	base := clock.NewManual(t0)
	require.Equal(t, t0.Add(2*time.Minute), clock.Offset{Base: base, By: 2 * time.Minute}.Now())
	require.Equal(t, t0.Add(-2*time.Minute), clock.Offset{Base: base, By: -2 * time.Minute}.Now())
	require.WithinDuration(t, time.Now().Add(time.Hour), clock.Offset{By: time.Hour}.Now(), time.Minute)
}

// Observe and Now from many goroutines at once (run with -race).
func TestServerConcurrent(t *testing.T) {
	s := clock.NewServer(nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 1000 {
				s.Observe(time.Now().Add(time.Duration(i) * time.Millisecond))
				_ = s.Now()
			}
		})
	}
	wg.Wait()
	require.InDelta(t, 7*time.Millisecond, s.Offset(), float64(5*time.Millisecond))
}
