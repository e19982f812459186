package intake

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// countJobs counts unfinished jobs; the slots' logic needs no server.
type countJobs struct{ open atomic.Int64 }

func (j *countJobs) Accept(context.Context, []byte, uint64, Gate) error { return nil }
func (j *countJobs) Reject(context.Context, uint64, []byte, []messages.FieldError) error {
	return nil
}
func (j *countJobs) LeaveNewer(jetstream.Msg) bool { return false }
func (j *countJobs) Unfinished() int               { return int(j.open.Load()) }

// At MaxOpenJobs, submissions wait, and are let in in the order the
// intake took them as slots free up; the open jobs count those being
// accepted.
func TestOpenSlotsLetSubmissionsInInOrder(t *testing.T) {
	jobs := &countJobs{}
	in := New(Config{Jobs: jobs, MaxOpenJobs: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs.open.Store(1) // one job runs already

	t1, t2, t3 := in.slots.ticket(), in.slots.ticket(), in.slots.ticket()
	release1, err := in.waitOpenSlot(ctx, t1)
	require.NoError(t, err)
	require.Equal(t, 2, in.OpenJobs(), "the running job and the one being accepted")

	entered := make(chan uint64, 2)
	var done sync.WaitGroup
	for _, tk := range []uint64{t3, t2} { // t3 asks first, but t2 was taken first
		done.Go(func() {
			release, err := in.waitOpenSlot(ctx, tk)
			if err != nil {
				return
			}
			entered <- tk
			release()
		})
	}
	require.Eventually(t, func() bool { // both hold their place
		in.slots.mu.Lock()
		defer in.slots.mu.Unlock()
		return len(in.slots.waiting) == 2
	}, 10*time.Second, time.Millisecond)
	require.Empty(t, entered, "no ticket enters at the limit")
	release1() // t1's job was refused: its slot frees up
	require.Equal(t, t2, <-entered, "the earlier ticket first")
	require.Equal(t, t3, <-entered)
	done.Wait() // t3's release, after it said it entered
	require.Equal(t, 1, in.OpenJobs())
}

// A waiting submission whose context ends leaves the queue: the next one
// is not held behind it.
func TestOpenSlotWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	jobs := &countJobs{}
	jobs.open.Store(1)
	in := New(Config{Jobs: jobs, MaxOpenJobs: 1})
	t1, t2 := in.slots.ticket(), in.slots.ticket()
	ctx1, cancel1 := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { _, err := in.waitOpenSlot(ctx1, t1); gaveUp <- err }()
	cancel1()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	jobs.open.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := in.waitOpenSlot(ctx, t2)
	require.NoError(t, err)
	release()
}
