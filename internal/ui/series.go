package ui

import "time"

// series counts events in fixed time buckets over a sliding window (a
// ring): the fleet's finished items and retries per bucket, or one job's.
// Not safe for concurrent use (the hub holds its lock).
type series struct {
	step  time.Duration
	done  []int64
	retry []int64
	head  int       // index of the newest bucket
	start time.Time // start of the newest bucket; zero = empty
}

func newSeries(step time.Duration, buckets int) *series {
	return &series{step: step, done: make([]int64, buckets), retry: make([]int64, buckets)}
}

// advance moves the newest bucket to the one holding t, clearing the
// buckets in between.
func (s *series) advance(t time.Time) {
	b := t.Truncate(s.step)
	if s.start.IsZero() {
		s.start = b
		return
	}
	n := int(b.Sub(s.start) / s.step)
	if n <= 0 {
		return
	}
	for i := 0; i < min(n, len(s.done)); i++ {
		s.head = (s.head + 1) % len(s.done)
		s.done[s.head], s.retry[s.head] = 0, 0
	}
	s.start = b
}

// add counts done items and retries at t (t not before the newest bucket
// minus the window; older counts go to the newest bucket).
func (s *series) add(t time.Time, done, retries int64) {
	s.advance(t)
	s.done[s.head] += done
	s.retry[s.head] += retries
}

// rates returns per-second rates, oldest bucket first, as of now.
func (s *series) rates(now time.Time) (done, retries []float64) {
	s.advance(now)
	n := len(s.done)
	done, retries = make([]float64, n), make([]float64, n)
	sec := s.step.Seconds()
	for i := range n {
		j := (s.head + 1 + i) % n
		done[i] = float64(s.done[j]) / sec
		retries[i] = float64(s.retry[j]) / sec
	}
	return done, retries
}
