package intake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// OpenJobs is the number of jobs pending or running (Jobs.Unfinished),
// and the durable submissions being accepted (each may become one).
func (in *Intake) OpenJobs() int {
	in.slots.mu.Lock()
	defer in.slots.mu.Unlock()
	return in.cfg.Jobs.Unfinished() + in.slots.accepting
}

// openSlots lets durable submissions into acceptance while fewer than
// MaxOpenJobs jobs are open or being accepted; at the limit, those that
// wait are let in in the order the intake took them. Safe for concurrent
// use.
type openSlots struct {
	mu sync.Mutex
	// accepting counts the submissions being accepted.
	accepting int
	// next is the last ticket given; waiting the tickets held at the
	// limit, in order.
	next    uint64
	waiting []uint64
	// changed is closed, and replaced, when waiting or accepting changes.
	changed chan struct{}
}

// ticket gives a submission its place in the order; the intake takes one
// per submission, in stream order, and the submission's acceptance calls
// waitOpenSlot with it.
func (o *openSlots) ticket() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	return o.next
}

// leave takes t out of the queue and wakes the waiters. o.mu is held.
func (o *openSlots) leave(t uint64) {
	if i := slices.Index(o.waiting, t); i >= 0 {
		o.waiting = slices.Delete(o.waiting, i, i+1)
	}
	o.wake()
}

// hold puts t in the queue, in order, if it is not there. o.mu is held.
func (o *openSlots) hold(t uint64) {
	i, found := slices.BinarySearch(o.waiting, t)
	if !found {
		o.waiting = slices.Insert(o.waiting, i, t)
	}
}

// drop takes t out of the queue if it is still there.
func (o *openSlots) drop(t uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.waiting, t) {
		o.leave(t)
	}
}

// wake tells the waiters that something changed. o.mu is held.
func (o *openSlots) wake() {
	if o.changed != nil {
		close(o.changed)
	}
	o.changed = make(chan struct{})
}

// openSlotPoll is how often a durable submission waiting for the number
// of open jobs to drop under the limit looks again.
var openSlotPoll = time.Second

// waitOpenSlot holds the durable submission with ticket t while
// MaxOpenJobs jobs are open or being accepted, or submissions taken
// before it wait for that: at the limit, submissions wait in the jobs
// stream and are accepted in order as jobs finish. It
// logs once per wait. The returned func gives the slot back once the
// submission is a job (the index counts it then) or refused.
func (in *Intake) waitOpenSlot(ctx context.Context, t uint64) (release func(), err error) {
	o := &in.slots
	logged := false
	for {
		o.mu.Lock()
		n := in.cfg.Jobs.Unfinished() + o.accepting
		if (len(o.waiting) == 0 || o.waiting[0] == t) && n < in.cfg.MaxOpenJobs {
			o.accepting++
			o.leave(t)
			o.mu.Unlock()
			if logged {
				in.log.Info().Msg("open jobs under the limit again; durable submissions are accepted")
			}
			return func() {
				o.mu.Lock()
				o.accepting--
				o.wake()
				o.mu.Unlock()
			}, nil
		}
		o.hold(t)
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		if !logged && n >= in.cfg.MaxOpenJobs {
			in.log.Warn().Str("reason", fmt.Sprintf("%d jobs are open (pending or running); the limit is %d (--max-open-jobs)", n, in.cfg.MaxOpenJobs)).
				Msg("open jobs at the limit; durable submissions wait in the jobs stream")
			logged = true
		}
		select {
		case <-ctx.Done():
			o.mu.Lock()
			o.leave(t)
			o.mu.Unlock()
			return nil, ctx.Err()
		case <-changed:
		case <-time.After(openSlotPoll):
		}
	}
}
