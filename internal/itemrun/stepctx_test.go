package itemrun

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func closed(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed")
	}
}

func TestStepContextBeforeItsDeadline(t *testing.T) {
	c, cancel := withStepDeadline(context.Background(), time.Now().Add(time.Hour))
	require.NoError(t, c.Err())
	d, ok := c.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Hour), d, time.Minute)
	cancel()
	require.ErrorIs(t, c.Err(), context.Canceled)
	closed(t, c.Done()) // asked for after cancel: closed at once
	require.ErrorIs(t, c.Err(), context.Canceled)
}

// Past its deadline it reports so without a timer, and its Done (made
// then) is closed.
func TestStepContextPastItsDeadline(t *testing.T) {
	c, cancel := withStepDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	closed(t, c.Done())
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(c), context.DeadlineExceeded)
}

func TestStepContextDoneFiresAtTheDeadline(t *testing.T) {
	c, cancel := withStepDeadline(context.Background(), time.Now().Add(20*time.Millisecond))
	defer cancel()
	closed(t, c.Done())
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
}

func TestStepContextFollowsItsParent(t *testing.T) {
	parent, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	c, cancel := withStepDeadline(parent, time.Now().Add(time.Hour))
	defer cancel()
	require.Equal(t, "v", c.Value(ctxKey{}))
	stop()
	require.ErrorIs(t, c.Err(), context.Canceled)
	closed(t, c.Done())

	// The parent's deadline, when earlier, is the deadline.
	early, stop2 := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer stop2()
	c2, cancel2 := withStepDeadline(early, time.Now().Add(time.Hour))
	defer cancel2()
	d, _ := c2.Deadline()
	want, _ := early.Deadline()
	require.Equal(t, want, d)
}

// Cancelled before its deadline, it stays cancelled after it.
func TestStepContextCancelledStaysCancelled(t *testing.T) {
	c, cancel := withStepDeadline(context.Background(), time.Now().Add(30*time.Millisecond))
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(c.deadline) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // to pass the deadline, not to wait for an outcome
	}
	require.ErrorIs(t, c.Err(), context.Canceled)
}

type ctxKey struct{}
