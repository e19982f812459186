package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// ServerWindow is how long an observation of the server's time counts
// towards Server's offset: the offset follows a local clock that is set
// back or forward within two windows.
const ServerWindow = time.Minute

// Server tells the time of the NATS server: the local clock plus an offset
// learnt from the timestamps the server stamps on the messages it stores
// (a JetStream message's metadata timestamp, a KV entry's Created). Times
// that one process writes and another compares with its own clock (a park
// deadline the server's message schedule fires at, a breaker's opened_at)
// are taken from it, so that machines whose clocks differ agree on them
// (docs/design.md, "Clocks").
//
// A stamp is when the server stored the message, at or before the moment
// it arrives here, so stamp - local now is a lower bound of the offset,
// tight for a message delivered at once. The offset is the greatest bound
// seen in the current and the previous ServerWindow; until the first
// observation it is zero (the local clock). Safe for concurrent use.
type Server struct {
	local Clock

	offset atomic.Int64 // the estimate, in nanoseconds: read without the lock

	mu        sync.Mutex
	cur, prev time.Duration // the greatest bound of this window and the last
	curSet    bool
	prevSet   bool
	winStart  time.Time // local time the current window began
}

// NewServer returns a Server clock over local (nil: the system clock).
func NewServer(local Clock) *Server {
	if local == nil {
		local = Real{}
	}
	return &Server{local: local}
}

// Now returns the server's time as estimated: the local clock plus the
// offset.
func (s *Server) Now() time.Time {
	return s.local.Now().Add(time.Duration(s.offset.Load()))
}

// Offset returns how far the server's clock is estimated to be ahead of
// the local one (negative: behind).
func (s *Server) Offset() time.Duration {
	return time.Duration(s.offset.Load())
}

// Observe takes the server's timestamp of a message that has just arrived.
// A zero stamp is ignored.
func (s *Server) Observe(stamp time.Time) {
	if stamp.IsZero() {
		return
	}
	now := s.local.Now()
	bound := stamp.Sub(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.curSet || now.Sub(s.winStart) >= ServerWindow || now.Before(s.winStart) {
		if s.curSet {
			s.prev, s.prevSet = s.cur, true
		}
		s.cur, s.curSet, s.winStart = bound, true, now
	} else if bound > s.cur {
		s.cur = bound
	}
	off := s.cur
	if s.prevSet && s.prev > off {
		off = s.prev
	}
	s.offset.Store(int64(off))
}

// Observer is a clock that learns the server's time from its timestamps
// (Server). A component whose clock is one passes it the stamps of the
// messages it receives.
type Observer interface {
	Clock
	Observe(stamp time.Time)
}

// Observe passes stamp to c when c is an Observer.
func Observe(c Clock, stamp time.Time) {
	if o, ok := c.(Observer); ok {
		o.Observe(stamp)
	}
}

// Offset is a clock a fixed duration ahead of another (behind, for a
// negative By): a machine whose clock is off, in tests.
type Offset struct {
	Base Clock // nil: the system clock
	By   time.Duration
}

// Now returns Base's time plus By.
func (o Offset) Now() time.Time {
	if o.Base == nil {
		return time.Now().Add(o.By)
	}
	return o.Base.Now().Add(o.By)
}

// After waits d on the local clock: the offset moves the time read, not
// how long a wait lasts.
func (s *Server) After(d time.Duration) <-chan time.Time {
	return s.local.After(d)
}

// After waits d on Base.
func (o Offset) After(d time.Duration) <-chan time.Time {
	if o.Base == nil {
		return time.After(d)
	}
	return o.Base.After(d)
}
