package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/api"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Several coordinators per prefix (docs/design.md, "Several
// coordinators"). Every coordinator serves the API; one, the holder of the
// lease in the control bucket (internal/lease), leads: it alone runs the
// intake, the job runners, the DLQ mover and monitor, replays, cancel
// requests, retention, the stranded-message sweep, the schedules' ticks
// (internal/scheduler) and the components registered with OnLeader. Each
// leadership term has its own context (runCtx), which ends when the lease is lost —
// before any other coordinator can take it — or when Run ends; lead waits
// for every goroutine of the term before another term can begin.

// component is work that runs only on the leader (OnLeader).
type component struct {
	name string
	run  func(ctx context.Context) error
}

// OnLeader registers run to be called at the start of every leadership
// term of this coordinator, in its own goroutine, with a context that ends
// with the term (the lease lost, or Run ending; context.Cause's message
// is "lease: lost" for the former). The term waits for run to return. A
// returned error other than the context's is logged. Such work must be
// idempotent and safe to repeat: a term can end anywhere, and the next
// leader runs it again. Call OnLeader before Run.
func (c *Coordinator) OnLeader(name string, run func(ctx context.Context) error) {
	c.components = append(c.components, component{name: name, run: run})
}

// IsLeader reports whether this coordinator leads its prefix now.
func (c *Coordinator) IsLeader() bool {
	return c.lease != nil && c.lease.IsLeader()
}

// Leader names the coordinator (Config.Holder) that leads, as this one
// last saw it; "" before Run or while none is known.
func (c *Coordinator) Leader() string {
	if c.lease == nil {
		return ""
	}
	return c.lease.Holder()
}

// adoptEvery is how often the leader looks for unfinished jobs without a
// runner (adopt).
var adoptEvery = 2 * time.Second

// lead runs one leadership term.
func (c *Coordinator) lead(ctx context.Context) {
	c.log.Info().Msg("leading: resuming jobs, replays and the intake")
	c.metrics.leader.Set(1)
	defer c.metrics.leader.Set(0)
	// The server's time before anything is timed (schedule ticks,
	// not_before, deadlines): the lease key this leader has just written
	// carries the server's stamp (docs/design.md, "Clocks").
	rctx, cancel := context.WithTimeout(ctx, c.cfg.HealthInterval)
	_, _, _ = stampedReader{kvleader.New(c.js, c.names.ControlBucket()), c.cfg.hooks.Clock}.Get(rctx, wire.LeaseKey)
	cancel()
	hub, err := c.startHub(ctx)
	if err != nil {
		return // the term ended first
	}
	defer hub.stop()
	c.mu.Lock()
	c.runCtx, c.hub = ctx, hub
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.runCtx, c.hub = nil, nil
		c.mu.Unlock()
	}()

	// Replays first: the jobs they replay are held before their runners
	// can complete them (internal/replay, hold.go).
	c.replays.HoldResumed(ctx)
	if err := c.resume(ctx); err != nil && ctx.Err() == nil {
		c.log.Error().Err(err).Msg("resuming jobs failed; the next sweep tries again")
	}
	c.goTerm("replays", func() error { return c.replays.Run(ctx) })
	mover := dlq.NewMover(c.js, c.names, c.itemsKV, c.log)
	c.goTerm("DLQ mover", func() error { return mover.Run(ctx) })
	c.goTerm("stranded-message sweep", func() error {
		sweeper, err := dlq.NewSweeper(mover, dlq.WithSweepMinAge(c.cfg.SweepMinAge), dlq.WithSweepClock(c.cfg.hooks.Clock.Now))
		if err != nil {
			return err
		}
		return sweeper.Run(ctx, c.cfg.SweepInterval)
	})
	c.goTerm("retention", func() error { c.retention.Run(ctx); return nil })
	c.startDLQ(ctx)
	c.goTerm("cancel requests", func() error { return c.followCancels(ctx) })
	c.goTerm("adopt", func() error { c.adopt(ctx); return nil })
	c.goTerm("leader status", func() error {
		return api.ServeLeaderStatus(ctx, c.nc, c.cfg.Prefix, c.log, c.apiStatusHere)
	})
	c.goTerm("schedules", func() error { return c.schedules.Run(ctx) })
	c.goTerm("held-item releases", func() error { return c.runReleases(ctx) })
	c.goTerm("placement", func() error { return c.runPlacement(ctx) })
	for _, comp := range c.components {
		c.goTerm(comp.name, func() error { return comp.run(ctx) })
	}
	c.goTerm("intake", func() error {
		if err := c.intake.Run(ctx); err != nil && ctx.Err() == nil {
			c.fail(err) // the connection is gone: Run returns it
		}
		return nil
	})
	<-ctx.Done()
	c.wg.Wait()
	c.replays.DropHolds()
	c.log.Info().Msg("leadership term over")
}

// Pacing of startHub. A new leader often starts its term just after a
// node was cut off, while the results stream's replicas elect a leader in
// place of one on that node (a raft election timeout, 4-9 s in
// nats-server 2.15): a request sent before the election is never answered.
// The first attempt therefore gives up after hubAttempt, not the
// JetStream API's 5 s, each further one a hubAttempt later than the last
// (up to 5 s: a loaded machine may need that long), and the next follows
// within hubBackoff, so that the hub starts a second or two after the
// election rather than up to 5 s after it; status waits for that
// (TestCutOffCoordinatorHandsOver).
const hubAttempt = time.Second

var hubBackoff = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}

// startHub starts the term's results hub (results.go), trying again
// until it starts or ctx ends: no runner can start without it.
func (c *Coordinator) startHub(ctx context.Context) (*resultsHub, error) {
	for fails := 0; ; fails++ {
		clk := c.cfg.hooks.Clock
		actx, cancel := context.WithTimeout(ctx, min(time.Duration(fails+1)*hubAttempt, 5*time.Second))
		hub, err := startResults(actx, c.js, c.names, c.log, func(t time.Time) { clock.Observe(clk, t) }, c.hubOpts)
		cancel()
		if err == nil {
			if c.replica != nil {
				hub.stream = c.replica(hub.stream)
			}
			return hub, nil
		}
		d := hubBackoff[min(fails, len(hubBackoff)-1)]
		c.log.Error().Err(err).Dur("delay", d).Msg("cannot follow the results stream; trying again")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
}

// goTerm runs fn in the current term; a panic is logged, not fatal.
func (c *Coordinator) goTerm(name string, fn func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				c.log.Error().Str("part", name).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("leader's part panicked")
			}
		}()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Error().Err(err).Str("part", name).Msg("leader's part stopped")
		}
	}()
}

// adopt starts a runner for every unfinished job that has none: a job a
// deposed leader accepted while this one listed the jobs, or one whose
// runner stopped (a panic, a record it could not write). It looks every
// adoptEvery; a job adopted again and again is tried after a growing
// delay (adoptBackoff), and each attempt is logged with that delay.
func (c *Coordinator) adopt(ctx context.Context) {
	t := time.NewTicker(adoptEvery)
	defer t.Stop()
	tries := map[string]*adoptTry{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		seen := make(map[string]bool, len(tries))
		for _, id := range c.index.unfinished() {
			seen[id] = true
			if c.runner(id) != nil {
				continue
			}
			try := tries[id]
			if try != nil && now.Before(try.next) {
				continue
			}
			rec, rev, err := c.store.getRev(ctx, id)
			if err != nil || rec.Spec == nil || messages.TerminalState(rec.Status.State) {
				continue
			}
			if try == nil {
				try = &adoptTry{}
				tries[id] = try
			}
			delay := adoptBackoff.Delay(try.n+1, 0, nil)
			try.n++
			try.next = now.Add(delay)
			c.log.Info().Str("job_id", id).Int("attempt", try.n).Dur("delay", delay).Msg("adopting an unfinished job without a runner")
			c.startRunner(*rec, rev)
		}
		for id := range tries {
			if !seen[id] {
				delete(tries, id) // finished: forget it
			}
		}
	}
}

// adoptTry counts the adoptions of a job that keeps losing its runner.
type adoptTry struct {
	n    int
	next time.Time
}

// adoptBackoff spaces the adoptions of one job: 2s doubling to 5 minutes.
var adoptBackoff = retry.Exponential(2*time.Second, 5*time.Minute)

// Durable cancels. A coordinator that runs the job's runner cancels it at
// once; any other writes a cancel request (key cancel.<job> of the control
// bucket), which the leader carries out and deletes, and waits for the job
// record to say the job ended.

// cancelWait bounds how long a follower waits for the leader to carry out
// a cancel request before it answers with the job's status as it is.
var cancelWait = 15 * time.Second

// cancelRequest is the value of a cancel request.
type cancelRequest struct {
	V    messages.Schema `json:"v"` // docs/contract.md §8
	By   string          `json:"by"`
	At   time.Time       `json:"at"`
	Kill bool            `json:"kill,omitempty"` // terminate running steps too
}

// requestCancel stores a cancel request and waits for the job to end.
func (c *Coordinator) requestCancel(ctx context.Context, req messages.CancelRequest) (*messages.JobStatus, error) {
	id := req.JobID
	rec, err := c.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if messages.TerminalState(rec.Status.State) {
		return &rec.Status, errJobFinished
	}
	data, _ := json.Marshal(cancelRequest{By: c.cfg.Holder, At: c.cfg.hooks.Clock.Now(), Kill: req.Kill})
	if _, err := c.control.Put(ctx, wire.CancelKey(id), data); err != nil {
		return nil, fmt.Errorf("storing the cancel request: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	for {
		if r := c.runner(id); r != nil { // this coordinator became the leader
			var opts []CancelOption
			if req.Kill {
				opts = append(opts, client.WithKill())
			}
			return c.JobCancel(ctx, id, opts...)
		}
		if rec, err := c.store.get(wctx, id); err == nil && (messages.TerminalState(rec.Status.State) || rec.Status.MapReason == messages.CompletionCancelled) {
			return &rec.Status, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// The request stays: the leader carries it out when it can.
			return &rec.Status, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// followCancels carries out cancel requests while this coordinator leads.
func (c *Coordinator) followCancels(ctx context.Context) error {
	w, err := c.control.Watch(ctx, wire.CancelKey("*"), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watching cancel requests: %w", err)
	}
	return kvwatch.Watch(ctx, w, nil, func(e jetstream.KeyValueEntry) {
		id := e.Key()[len(wire.CancelKey("")):]
		var req cancelRequest
		_ = json.Unmarshal(e.Value(), &req) // a bad value is a plain cancel
		if err := req.V.Check("the cancel request of job " + id); err != nil {
			// Left, not carried out nor deleted, for a leader of the newer
			// release (docs/contract.md §8); the watch delivers each once.
			c.log.Warn().Err(err).Str("job_id", id).Msg("cancel request left for a coordinator of a newer release")
			return
		}
		if _, ok, err := c.setupCancel(ctx, id, req.Kill); ok {
			if err != nil {
				c.log.Warn().Err(err).Str("job_id", id).Msg("carrying out a cancel request failed; the next leader tries again")
				return
			}
			_ = c.control.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
			return
		}
		r := c.runner(id)
		for wait := time.Now().Add(2 * adoptEvery); r == nil && time.Now().Before(wait); r = c.runner(id) {
			// A job being resumed or adopted gets its runner shortly.
			rec, err := c.store.get(ctx, id)
			if err != nil || messages.TerminalState(rec.Status.State) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		if r != nil {
			sctx, cancel := context.WithTimeout(ctx, cancelWait)
			_, err := r.stop(sctx, stopRequest{state: messages.StateCancelled, reason: messages.CompletionCancelled, kill: req.Kill})
			cancel()
			if err != nil && !errors.Is(err, errJobFinished) {
				c.log.Warn().Err(err).Str("job_id", id).Msg("carrying out a cancel request failed; the next leader tries again")
				return
			}
			c.log.Info().Str("job_id", id).Msg("job cancelled on request")
		} else if rec, err := c.store.get(ctx, id); err == nil && !messages.TerminalState(rec.Status.State) {
			return // still no runner: keep the request for the next term
		}
		_ = c.control.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
	})
}
