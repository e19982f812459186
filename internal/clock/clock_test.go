package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
)

func TestManual(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var c clock.Clock = clock.NewManual(t0)
	m := c.(*clock.Manual)
	require.Equal(t, t0, c.Now())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { m.Advance(time.Second); _ = m.Now() })
	}
	wg.Wait()
	require.Equal(t, t0.Add(10*time.Second), c.Now())
	m.Advance(-time.Minute)
	require.Equal(t, t0.Add(-50*time.Second), c.Now())
}
