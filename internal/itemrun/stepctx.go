package itemrun

import (
	"context"
	"sync"
	"time"
)

// stepContext is context.WithDeadline(parent, deadline) whose timer is made
// only when someone asks for Done: a handler that never waits on its
// context (a quick computation) costs no timer and no registration with
// its parent, which were a tenth of an agent's CPU per item. Err reports
// the deadline by the clock until then. Safe for concurrent use.
type stepContext struct {
	context.Context // the parent, for Value and its own cancellation
	deadline        time.Time

	mu       sync.Mutex
	inner    context.Context // the real WithDeadline, once Done or Value was asked for
	cancelFn context.CancelFunc
	stopErr  error // Err as it was when cancel was called; nil: not called
}

// withStepDeadline returns a context that ends at deadline or with parent,
// and the function that releases it.
func withStepDeadline(parent context.Context, deadline time.Time) (*stepContext, context.CancelFunc) {
	c := &stepContext{Context: parent, deadline: deadline}
	return c, c.cancel
}

func (c *stepContext) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done makes the timer, once.
func (c *stepContext) Done() <-chan struct{} {
	return c.real().Done()
}

// Value answers from the real context, so that context.Cause finds its
// cause there.
func (c *stepContext) Value(key any) any {
	return c.real().Value(key)
}

// real is the context.WithDeadline this one stands for, made on first use.
func (c *stepContext) real() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancelFn = context.WithDeadline(c.Context, c.deadline)
		if c.stopErr != nil {
			c.cancelFn()
		}
	}
	return c.inner
}

func (c *stepContext) Err() error {
	c.mu.Lock()
	inner, stopErr := c.inner, c.stopErr
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case stopErr != nil:
		return stopErr
	}
	return c.errNow()
}

// errNow is Err by the clock, for a context whose timer was never made.
func (c *stepContext) errNow() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *stepContext) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelFn != nil {
		c.cancelFn()
		return
	}
	if c.stopErr == nil {
		c.stopErr = c.errNow()
		if c.stopErr == nil {
			c.stopErr = context.Canceled
		}
	}
}
