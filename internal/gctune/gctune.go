// Package gctune gives a daemon's heap a floor: the garbage collector is
// not started until the heap reaches Floor bytes, however small the live
// heap, and above that it runs as Go's default (GOGC=100) does.
//
// Go collects when the heap has grown by GOGC percent of the live heap. A
// coordinator's live heap is a few megabytes between jobs and during a
// small one, while it allocates for every work message and result: at
// GOGC=100 it collected every few megabytes, a fifth of its CPU in the
// daemon benchmark (docs/benchmarks.md). A fixed higher GOGC would multiply
// the heap of a large input's count (about 50 bytes an item live) by as
// much; the floor does not: the heap goal is max(Floor, 2 × live).
//
// After every collection the tuner reads the live heap and sets GOGC so that
// the next goal is that maximum. It runs on the runtime's cleanup goroutine,
// once a cycle; it starts no goroutine of its own.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// minPercent is Go's default GOGC, what the tuner sets once the live heap
// is half the floor or more.
const minPercent = 100

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with GOGC (at GOGC=p it is heapMinimum × p/100, whatever the live heap),
// so a GOGC above floor/heapMinimum × 100 would put the goal above the
// floor for a nearly empty heap: before the first collection, 400 MB at
// GOGC=10000.
const heapMinimum = 4 << 20

// Percent is the GOGC that makes the heap goal max(floor, 2 × live) for a
// live heap of live bytes (0: none marked yet).
func Percent(floor, live uint64) int {
	maxPercent := max(floor*100/heapMinimum, minPercent)
	if live == 0 {
		return int(maxPercent)
	}
	if floor <= 2*live {
		return minPercent
	}
	return int(min((floor-live)*100/live, maxPercent))
}

type tuner struct {
	floor  uint64
	sample []metrics.Sample

	mu      sync.Mutex // stop against a tune under way
	stopped bool
}

// sentinel is the object whose cleanup runs once per collection.
type sentinel struct{ _ [16]byte }

// Start sets GOGC for a heap of at least floor bytes now and after every
// collection, until the returned stop is called (which sets GOGC back to
// what it was). A caller that wants the user's GOGC to win does not call
// Start when the environment sets GOGC.
func Start(floor uint64) (stop func()) {
	t := &tuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	prev := debug.SetGCPercent(t.percent())
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.stopped {
			t.stopped = true
			debug.SetGCPercent(prev)
		}
	}
}

// arm schedules tune for the end of the next collection that finds the
// new sentinel unreachable, i.e. the next one.
func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) { t.tune() }, t)
}

func (t *tuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	debug.SetGCPercent(t.percent())
	t.arm()
}

// percent is Percent of the live heap the last collection marked.
func (t *tuner) percent() int {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return minPercent
	}
	return Percent(t.floor, t.sample[0].Value.Uint64())
}
