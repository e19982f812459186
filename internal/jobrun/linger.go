package jobrun

import "time"

// lateWait times a finished job's wait for late results (docs/jobs.md,
// "Late results"): a window of LateResultWindow from the job's finish,
// another for each hold a DLQ replay asked for (lifecycle.hold), none
// once the job is reopened. What a passing window means is the
// lifecycle's to decide (windowPassed); lateWait only keeps the timer. It
// belongs to the run loop; it is not safe for concurrent use.
type lateWait struct {
	window time.Duration
	after  func(time.Duration) <-chan time.Time
	timer  <-chan time.Time // nil: not waiting
}

func newLateWait(window time.Duration) *lateWait {
	return &lateWait{window: window, after: time.After}
}

// start begins a window (again).
func (w *lateWait) start() { w.timer = w.after(w.window) }

// cancel ends the wait: the job was reopened.
func (w *lateWait) cancel() { w.timer = nil }

// waiting reports whether a window runs.
func (w *lateWait) waiting() bool { return w.timer != nil }

// passed delivers when the window passes; never when none runs.
func (w *lateWait) passed() <-chan time.Time { return w.timer }

// decide applies the lifecycle's verdict on a window that passed: it
// starts another, or ends the wait. It reports whether the runner exits.
func (w *lateWait) decide(exit, again bool) bool {
	w.timer = nil
	if again {
		w.start()
	}
	return exit
}
