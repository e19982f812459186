package keylock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A second caller of a key waits for the first to unlock; another key
// does not wait; a key's entry goes with its last caller.
func TestLockTakesTurnsPerKey(t *testing.T) {
	var m Map
	unlockA := m.Lock("a")
	unlockB := m.Lock("b") // another key: no wait

	got := make(chan struct{})
	go func() {
		unlock := m.Lock("a")
		close(got)
		unlock()
	}()
	require.Eventually(t, func() bool { // the second caller is counted
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.held["a"].users == 2
	}, 10*time.Second, time.Millisecond)
	select {
	case <-got:
		t.Fatal("a second caller of a held key did not wait")
	default:
	}
	unlockA()
	<-got
	unlockB()
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Empty(t, m.held, "no entry outlives its callers")
}
