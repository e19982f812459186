package itemrun

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A handler that runs long keeps its message with InProgress every
// heartbeat interval. A timer per handler call cost more than the call of
// a quick handler, so the workers' calls share one ticker instead: each
// worker has a slot that holds the message its handler is running, and
// the ticker, every quarter interval, sends InProgress for each message
// held for an interval since its last one (the first within 1.25
// intervals of the call's start, far inside AckWait at the default third
// of it).

// hbSlot is one worker's handler call in progress. Safe for concurrent use.
type hbSlot struct {
	mu    sync.Mutex
	m     jetstream.Msg // nil: no call in progress
	since time.Time     // the call's start, or its last InProgress
}

func (s *hbSlot) begin(m jetstream.Msg, now time.Time) {
	s.mu.Lock()
	s.m, s.since = m, now
	s.mu.Unlock()
}

func (s *hbSlot) end() {
	s.mu.Lock()
	s.m = nil
	s.mu.Unlock()
}

// beat sends InProgress for the slot's message if it has been held for
// interval since the last one.
func (s *hbSlot) beat(now time.Time, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil && now.Sub(s.since) >= interval {
		_ = s.m.InProgress()
		s.since = now
	}
}

// heartbeats runs the ticker over slots until the returned stop is called.
func (a *Agent) heartbeats(slots []hbSlot) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(max(a.hb/4, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				for i := range slots {
					slots[i].beat(now, a.hb)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}
