package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		floor, live uint64
		want        int
	}{
		{128 * mb, 0, 3200},              // no collection yet: the runtime's minimum goal (4 MB × 32) is the floor
		{128 * mb, 1 << 10, 3200},        // nearly empty: the same bound
		{64 * mb, 1 << 10, 1600},         // the bound follows the floor
		{2 * mb, 1 << 10, minPercent},    // a floor under the runtime's minimum: the default
		{128 * mb, 2 * mb, 3200},         // 2 + 126 MB would be 6300: bounded
		{128 * mb, 4 * mb, 3100},         // goal 4 + 124 = 128 MB
		{128 * mb, 32 * mb, 300},         // 32 + 96
		{128 * mb, 64 * mb, minPercent},  // 2 × live is the floor
		{128 * mb, 500 * mb, minPercent}, // Go's default above it
		{0, 4 * mb, minPercent},          // no floor
	} {
		if got := Percent(c.floor, c.live); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.floor, c.live, got, c.want)
		}
	}
	// The goal it gives is the floor within rounding, or 2 × live.
	for live := uint64(4 * mb); live < 256*mb; live += 7 * mb {
		p := uint64(Percent(128*mb, live))
		goal := live + live*p/100
		if want := max(128*mb, 2*live); goal > want || want-goal > live/100+1 {
			t.Errorf("live %d: goal %d, want %d", live, goal, want)
		}
	}
}

// TestStartTunesAfterEveryCollection: GOGC follows the live heap from one
// collection to the next, and stop puts the previous GOGC back.
func TestStartTunesAfterEveryCollection(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	const floor = 1 << 40 // a floor no test heap reaches: GOGC at its bound
	maxPercent := Percent(floor, 1)
	stop := Start(floor)
	if got := debug.SetGCPercent(minPercent); got != maxPercent {
		t.Fatalf("GOGC after Start = %d, want %d", got, maxPercent)
	}
	// A collection runs the cleanup, which sets it again (on the runtime's
	// cleanup goroutine: wait for it).
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := debug.SetGCPercent(minPercent)
		if got == maxPercent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC not set again after a collection (%d)", got)
		}
		runtime.GC()
		runtime.Gosched()
	}
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC after stop = %d, want the previous 100", got)
	}
	// Stopped: collections leave GOGC alone.
	debug.SetGCPercent(42)
	for range 3 {
		runtime.GC()
	}
	if got := debug.SetGCPercent(100); got != 42 {
		t.Fatalf("GOGC changed after stop: %d", got)
	}
}
