package itemrun

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// sentNak is a nak the pacer sent: its message and delay.
type sentNak struct {
	msg   int
	delay time.Duration
}

// sinkMsg records its naks on sink. Nothing else may be called.
type sinkMsg struct {
	jetstream.Msg
	id   int
	sink chan sentNak
}

func (m *sinkMsg) NakWithDelay(d time.Duration) error {
	m.sink <- sentNak{msg: m.id, delay: d}
	return nil
}

// takeNaks waits for n naks on sink and returns their delays by message.
func takeNaks(sink <-chan sentNak, n int) map[int]time.Duration {
	got := map[int]time.Duration{}
	for range n {
		s := <-sink
		got[s.msg] = s.delay
	}
	return got
}

// The pacer sends its naks together once a tick of the wall clock, each
// with what is left of its delay (at least 1 ms: never a bare nak), and
// once closed it sends what it holds and every later nak at once.
func TestNakPacerSendsOnTicksWithWhatIsLeftOfTheDelay(t *testing.T) {
	var mu sync.Mutex
	clock := time.Date(2026, 11, 28, 12, 0, 0, 3_000_000, time.UTC) // 3 ms into a tick
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	waits := make(chan time.Duration, 1)
	tick := make(chan time.Time)
	sink := make(chan sentNak, 16)
	p := newNakPacer()
	p.now = now
	p.after = func(d time.Duration) <-chan time.Time { waits <- d; return tick }
	go p.run()

	p.nak(&sinkMsg{id: 1, sink: sink}, 100*time.Millisecond)
	require.Equal(t, 17*time.Millisecond, <-waits, "until the next tick of the grid")
	advance(5 * time.Millisecond)
	p.nak(&sinkMsg{id: 2, sink: sink}, 2*time.Millisecond) // failed 5 ms later: the same tick
	advance(12 * time.Millisecond)
	require.Empty(t, sink, "nothing before the tick")
	tick <- clock
	require.Equal(t, map[int]time.Duration{1: 83 * time.Millisecond, 2: time.Millisecond}, takeNaks(sink, 2),
		"100 ms less the 17 ms waited; 2 ms less 12 ms is past: the least delay, not a bare nak")

	p.nak(&sinkMsg{id: 3, sink: sink}, time.Second)
	<-waits
	p.close() // sends the held nak without a tick
	require.Equal(t, sentNak{msg: 3, delay: time.Second}, <-sink)
	p.nak(&sinkMsg{id: 4, sink: sink}, 50*time.Millisecond) // closed: at once
	require.Equal(t, sentNak{msg: 4, delay: 50 * time.Millisecond}, <-sink)
}
