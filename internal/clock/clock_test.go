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

func TestManualAfterFiresWhenAdvancedPast(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := clock.NewManual(t0)
	now := c.After(0)
	require.Equal(t, t0, <-now)
	soon, later := c.After(time.Second), c.After(time.Minute)
	c.Advance(999 * time.Millisecond)
	select {
	case <-soon:
		t.Fatal("fired before its time")
	default:
	}
	c.Advance(time.Millisecond)
	require.Equal(t, t0.Add(time.Second), <-soon)
	select {
	case <-later:
		t.Fatal("a minute has not passed")
	default:
	}
	c.Advance(time.Hour)
	require.Equal(t, t0.Add(time.Hour+time.Second), <-later)
}

func TestRealAndAfterFunc(t *testing.T) {
	var c clock.Clock = clock.Real{}
	<-c.After(0)
	fired := make(chan time.Time, 1)
	fired <- time.Time{}
	var asked time.Duration
	c = clock.AfterFunc(func(d time.Duration) <-chan time.Time { asked = d; return fired })
	<-c.After(3 * time.Second)
	require.Equal(t, 3*time.Second, asked)
	require.False(t, c.Now().IsZero())
}
