package agent

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

// killSwitch keeps a cancel function per map item in flight, by job, so
// that a cancel with kill (a map_ended event with kill set, watchEnded)
// ends every running step of the job: a shell step's process group gets
// SIGTERM, then SIGKILL after Config.KillGrace (shell.Run), and a
// handler's context ends with ErrJobKilled. Safe for concurrent use.
type killSwitch struct {
	mu      sync.Mutex
	next    uint64
	running map[string]map[uint64]context.CancelCauseFunc
}

func newKillSwitch() *killSwitch {
	return &killSwitch{running: map[string]map[uint64]context.CancelCauseFunc{}}
}

// track registers an item of job: its context is ctx's, cancelled with
// ErrJobKilled when the job is killed. done unregisters it.
//
// An item tracked after a kill of its job was sent is not cancelled by it:
// the agent marks the job's map phase ended before it kills, and checks
// that mark after track, so such an item is dropped without running (a
// replay's items, which do run, are new work).
func (k *killSwitch) track(ctx context.Context, job string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	k.mu.Lock()
	id := k.next
	k.next++
	m := k.running[job]
	if m == nil {
		m = map[uint64]context.CancelCauseFunc{}
		k.running[job] = m
	}
	m[id] = cancel
	k.mu.Unlock()
	return ctx, func() {
		k.mu.Lock()
		delete(m, id)
		if len(m) == 0 { // only an empty map ever leaves running: it is m
			delete(k.running, job)
		}
		k.mu.Unlock()
		cancel(context.Canceled)
	}
}

// kill cancels every tracked item of job with ErrJobKilled and returns how
// many there were.
func (k *killSwitch) kill(job string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.running[job]
	for _, cancel := range m {
		cancel(ErrJobKilled)
	}
	return len(m)
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
