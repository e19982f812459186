package itemrun

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrJobKilled is the cause (context.Cause) of the context a step runs
// with once its job was cancelled with kill (fleetctl cancel --kill): a
// handler that sees its context end can tell this from a shutdown or its
// timeout. The item is not retried, dead-lettered or reported; the job
// counts it not_run.
var ErrJobKilled = errors.New("agent: job cancelled with kill")

// killSwitch keeps the contexts of the map items in flight, by job, so
// that a cancel with kill (a map_ended event with kill set, watchEnded)
// ends every running step of the job: a shell step's process group gets
// SIGTERM, then SIGKILL after Config.KillGrace (shell.Run), and a
// handler's context ends with ErrJobKilled. Safe for concurrent use.
type killSwitch struct {
	mu      sync.Mutex
	running map[string]map[*killContext]struct{}
}

func newKillSwitch() *killSwitch {
	return &killSwitch{running: map[string]map[*killContext]struct{}{}}
}

// track registers an item of job: its context is ctx's, cancelled with
// ErrJobKilled when the job is killed. done unregisters it.
//
// An item tracked after a kill of its job was sent is not cancelled by it:
// the agent marks the job's map phase ended before it kills, and checks
// that mark after track, so such an item is dropped without running (a
// replay's items, which do run, are new work).
func (k *killSwitch) track(ctx context.Context, job string) *killContext {
	c := &killContext{Context: ctx, job: job}
	k.mu.Lock()
	m := k.running[job]
	if m == nil {
		m = map[*killContext]struct{}{}
		k.running[job] = m
	}
	m[c] = struct{}{}
	k.mu.Unlock()
	return c
}

// done unregisters c, which track returned, and releases it.
func (k *killSwitch) done(c *killContext) {
	k.mu.Lock()
	m := k.running[c.job]
	delete(m, c)
	if len(m) == 0 {
		delete(k.running, c.job)
	}
	k.mu.Unlock()
	c.stop(context.Canceled)
}

// kill cancels every tracked item of job with ErrJobKilled and returns how
// many there were.
func (k *killSwitch) kill(job string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.running[job]
	for c := range m {
		c.stop(ErrJobKilled)
	}
	return len(m)
}

// killContext is context.WithCancelCause(parent) made only when someone
// asks for Done or Value, as stepContext makes its timer: a step that never
// waits on its context (a quick handler) costs no cancel context and no
// registration with its parent per item. Until then stop records the
// cause, and Err reports it. Safe for concurrent use.
type killContext struct {
	context.Context // the parent
	job             string

	mu     sync.Mutex
	inner  context.Context // the real WithCancelCause, once Done or Value was asked for
	cancel context.CancelCauseFunc
	cause  error // what stop was given before inner was made; nil: not stopped
}

// Done makes the real context, once.
func (c *killContext) Done() <-chan struct{} { return c.real().Done() }

// Value answers from the real context, so that context.Cause finds the
// cause there.
func (c *killContext) Value(key any) any { return c.real().Value(key) }

func (c *killContext) Err() error {
	c.mu.Lock()
	inner, cause := c.inner, c.cause
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case cause != nil:
		return context.Canceled
	}
	return c.Context.Err()
}

// real is the context.WithCancelCause this one stands for, made on first
// use and cancelled at once with the cause stop recorded, if any.
func (c *killContext) real() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithCancelCause(c.Context)
		if c.cause != nil {
			c.cancel(c.cause)
		}
	}
	return c.inner
}

// stop cancels the context with cause. The first cause wins, and a parent
// that ended first keeps its own, as with WithCancelCause.
func (c *killContext) stop(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cancel != nil:
		c.cancel(cause)
	case c.cause == nil && c.Context.Err() == nil:
		c.cause = cause
	}
}

// killed reports whether ctx, an item's, ended because its job was killed
// (and not because the agent is shutting down).
func killed(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrJobKilled)
}

// dropKilled ends a delivery whose job was cancelled with kill: its step
// was terminated, and the job already counts the item not_run (the
// cancel did). Nothing is reported, retried or dead-lettered; the message
// leaves the work stream (Term is an ack there).
func (a *Agent) dropKilled(it *item) {
	a.log.Info().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("step", it.st.Step).
		Dur("duration", a.cfg.hooks.Clock.Now().Sub(it.t0).Round(time.Millisecond)).Msg("step killed: the job was cancelled with kill")
	a.metrics.attempts.WithLabelValues("cancelled").Inc()
	a.metrics.items.WithLabelValues(outcomeKilled).Inc()
	_ = it.m.Term()
}

// outcomeKilled counts the deliveries dropKilled ended.
const outcomeKilled = "killed"
