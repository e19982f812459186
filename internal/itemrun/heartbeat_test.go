package itemrun

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// beatMsg counts InProgress.
type beatMsg struct {
	recMsg
	beats atomic.Int32
}

func (m *beatMsg) InProgress() error { m.beats.Add(1); return nil }

func TestHeartbeatSlot(t *testing.T) {
	var s hbSlot
	m := &beatMsg{}
	s.beat(t0, time.Second) // nothing held: nothing sent
	s.begin(m, t0)
	s.beat(t0.Add(999*time.Millisecond), time.Second)
	require.Zero(t, m.beats.Load(), "not yet an interval")
	s.beat(t0.Add(time.Second), time.Second)
	require.EqualValues(t, 1, m.beats.Load())
	s.beat(t0.Add(1500*time.Millisecond), time.Second)
	require.EqualValues(t, 1, m.beats.Load(), "an interval since the last one, not since the start")
	s.beat(t0.Add(2*time.Second), time.Second)
	require.EqualValues(t, 2, m.beats.Load())
	s.end()
	s.beat(t0.Add(time.Hour), time.Second)
	require.EqualValues(t, 2, m.beats.Load(), "the call ended")
}

// The shared ticker keeps a long handler call's message alive.
func TestHeartbeatsTick(t *testing.T) {
	a := New(nil, Config{})
	a.hb = 20 * time.Millisecond
	slots := make([]hbSlot, 2)
	stop := a.heartbeats(slots)
	defer stop()
	m := &beatMsg{}
	slots[1].begin(m, time.Now())
	deadline := time.Now().Add(10 * time.Second)
	for m.beats.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling for the outcome, with a deadline
	}
	require.GreaterOrEqual(t, m.beats.Load(), int32(3))
	slots[1].end()
}
