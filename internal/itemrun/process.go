package itemrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/secret"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/specenv"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// maxMessageBytes bounds error messages kept in histories and results.
const maxMessageBytes = wire.MaxErrorBytes

// messageRoom is kept under the server's max_payload for headers and
// protocol overhead when an item's state or result is encoded to fit.
const messageRoom = 1024

// maxPayload is the limit of the agent's messages: the server's
// max_payload less messageRoom.
func (a *Agent) maxPayload() int { return int(a.maxPayloadOf()) - messageRoom }

// item is one delivery being processed.
type item struct {
	m   jetstream.Msg
	md  *jetstream.MsgMetadata
	wi  wire.WorkItem
	job *job
	set *stepSet // the job's map steps, or its reduce steps
	mv  *shell.MapVars
	st  wire.ItemState
	rev uint64 // revision of the item's state key; 0 = none read or written
	key string // the item's key in the items bucket: see itemKey
	t0  time.Time
	// reset is when this agent took the delivery (its AckWait began at
	// most a buffer's wait before); a local retry keeps its delivery's.
	reset time.Time
	// localRetries counts the local retries in a row that led to this run
	// (localretry.go); unwritten: the state holds runs of this delivery not
	// written yet, written when the delivery leaves the agent (writeLocal).
	localRetries int
	unwritten    bool

	// breaker is the job's circuit breaker for this delivery (zero: none),
	// stepBreaker the current step's own for its current run.
	breaker     breakerTicket
	stepBreaker breakerTicket
	// breakerParked: the delivery is parked because its job's breaker
	// refused it (its schedule is marked, release.go).
	breakerParked bool
	// deadline is when the job's agent_timeout ends the item's run (zero:
	// none), from the run's start persisted in its state.
	deadline retry.Deadline

	// carry is what a replay continues from (see carriedAttempts).
	carry carried
	// env is the job's environment resolved for this delivery, and mask
	// its secrets' masker (jobenv.go); nil when the job has none to
	// resolve.
	env  *specenv.Resolved
	mask *secret.Masker
	// dir is the delivery's own directory (itemdir.go), made by its first
	// shell step; failedRun keeps it for inspection when it ends.
	dir       string
	failedRun bool
	// hb is the worker's heartbeat slot (heartbeat.go).
	hb *hbSlot
	// free gives the worker's slot back (freeSlot); nil once given.
	free func()
	// trace holds the delivery's spans (tracing.go).
	trace itemTrace

	// Room for what most deliveries need, so that they need no allocation
	// of their own: the result (result), one successful step run and one
	// step output (runSteps, stepDone).
	res    messages.Result
	ranBuf [1]messages.StepRun
	// ran is what the latest shell step's run left besides its output,
	// for its capture (capture.go).
	ran shellRan
	// justRan is the output of the step whose on_success runs: its
	// ${shell.output} (capture.go).
	justRan *string
	outBuf  [1]string
	// fixed is the outcome of the fallback run after the current step's
	// last failed run (fallback.go); nil when none ran.
	fixed *fixRun
}

// carried is the step an item gave up at in an earlier generation and the
// runs it had used there.
type carried struct {
	ok       bool
	step     int
	attempts int
}

// carriedAttempts is where a replayed item continues counting, as River's
// JobRetry and Sidekiq's and Asynq's dead-set re-runs do: the step that
// failed keeps the attempts it used, so an item that had used them all gets
// exactly one more run. A replay with --reset-attempts, a first run and a
// reduce item carry nothing. The latest attempt of an earlier generation in
// the history says where the item stopped.
func carriedAttempts(wi *wire.WorkItem) carried {
	if wi.ResetAttempts || wi.ReplayCount == 0 || wi.Phase != "" {
		return carried{}
	}
	for i := len(wi.History) - 1; i >= 0; i-- {
		if h := wi.History[i]; h.Generation < wi.Generation && h.Attempt > 0 {
			return carried{ok: true, step: h.Step, attempts: h.Attempt}
		}
	}
	return carried{}
}

// safeProcessOn runs process on a worker whose handler calls send their
// heartbeats through slot. A panic there (a bug some message found) would
// end the agent, and the message, redelivered, would end the next one: the
// message is dead-lettered as poison instead, and the agent goes on.
//
// free, when not nil, hands the worker's slot to another worker (see
// consume): called once a failed run ends what this delivery can run of
// the item, so that its bookkeeping (the budget claim, the state write and
// the delayed nak, or the dead letter) holds no slot. A success's
// bookkeeping is handing the result to the batcher: it keeps the slot.
func (a *Agent) safeProcessOn(ctx context.Context, m jetstream.Msg, slot *hbSlot, free func()) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		a.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Str("subject", m.Subject()).
			Msg("handling a work message panicked; dead-lettering it as poison")
		defer func() {
			if recover() != nil {
				_ = m.Term() // not even that worked: drop it rather than loop
			}
		}()
		it := &item{m: m, t0: a.cfg.hooks.Clock.Now()}
		md, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		it.md = md
		_ = json.Unmarshal(m.Data(), &it.wi)
		a.poison(ctx, it, messages.ReasonPoison, fmt.Errorf("the agent panicked handling this message: %v", p))
	}()
	a.process(ctx, m, slot, free)
}

// process handles one delivery end to end, or one local retry of it (m is
// then a *localRetry). It never returns an error: every path ends in an
// ack, a term, a delayed nak, a local retry or (for a fenced-off zombie)
// nothing, leaving the message to its current holder.
func (a *Agent) process(ctx context.Context, m jetstream.Msg, slot *hbSlot, free func()) {
	it := &item{m: m, t0: a.cfg.hooks.Clock.Now(), hb: slot, free: free}
	it.reset = it.t0
	ctx = a.traceItem(ctx, it)
	defer a.endItemTrace(it)
	again, isLocal := m.(*localRetry)
	if isLocal {
		// Checked and decoded when it was delivered (localretry.go).
		it.md, it.wi, it.reset = again.md, again.wi, again.reset
	} else if !a.admit(ctx, it) {
		return
	}
	md := it.md
	// Built only for a warning: a logger context costs allocations per item.
	log := func() *zerolog.Logger {
		l := a.log.With().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Uint64("num_delivered", md.NumDelivered).Logger()
		return &l
	}

	var err error
	it.job, err = a.jobs.get(ctx, it.wi.JobID)
	if errors.Is(err, errJobNotFound) {
		a.poison(ctx, it, messages.ReasonJobGone, fmt.Errorf("job %q not found", it.wi.JobID))
		return
	}
	if err != nil {
		log().Warn().Err(err).Msg("cannot load job; retrying later")
		a.nakDelay(it, 2*time.Second)
		return
	}
	if want := it.job.pool(&it.wi); want != a.cfg.Pool {
		a.refuse(it, fmt.Sprintf("the job routes it to pool %q", want))
		return
	}
	it.set = it.job.mapSteps
	if it.wi.Phase != messages.PhaseReduce {
		// Tracked before the map_ended check below: a cancel with kill
		// marks the job ended first, then kills what it tracks, so an item
		// is either killed or never started. The reduce item is not
		// tracked: a cancel does not stop a job's reduce phase.
		kctx := a.kills.track(ctx, it.wi.JobID)
		defer a.kills.done(kctx)
		ctx = kctx
	}
	if it.wi.Phase == messages.PhaseReduce {
		if it.job.reduce == nil || it.wi.Reduce == nil {
			a.poison(ctx, it, messages.ReasonPoison, errors.New("reduce item of a job without reduce steps"))
			return
		}
		it.set = it.job.reduce
		cleanup, err := a.prepareReduce(ctx, it)
		if err != nil {
			log().Warn().Err(err).Msg("cannot fetch the map results; retrying later")
			a.nakDelay(it, 2*time.Second)
			return
		}
		defer cleanup()
	} else if it.wi.Phase == messages.PhaseSetup {
		if it.job.setup == nil {
			a.poison(ctx, it, messages.ReasonPoison, errors.New("setup item of a job without setup steps or an input command"))
			return
		}
		it.set = it.job.setup
	} else if it.wi.Generation == 0 && a.jobs.isEnded(it.wi.JobID) {
		// The job stopped, was cancelled or completed early: the coordinator
		// counted this item not_run. Replays (generation > 0) still run.
		a.metrics.items.WithLabelValues(messages.OutcomeNotRun).Inc()
		_ = m.Term()
		return
	}

	if a.holds(it) {
		a.hold(ctx, it) // its job or pool is paused (hold.go)
		return
	}

	it.st = wire.ItemState{JobID: it.wi.JobID, ItemID: it.wi.ItemID, Generation: it.wi.Generation}
	it.carry = carriedAttempts(&it.wi)
	if isLocal {
		it.st, it.rev, it.key, it.localRetries, it.unwritten = again.st, again.rev, again.key, again.n, again.unwritten
		again.unwritten = false // the item writes them now (writeLocal)
	} else if md.NumDelivered > 1 || it.wi.Generation > 0 || it.wi.Park > 0 || it.wi.Held > 0 {
		if err := a.loadState(ctx, it); err != nil {
			if a.leaveNewer(it, err) {
				return
			}
			ev := log().Warn()
			if a.link.unreachableItem(err, "item state") {
				ev = log().Debug()
			}
			ev.Err(err).Msg("cannot read item state; retrying later")
			a.nakDelay(it, time.Second)
			return
		}
	}
	if it.st.Park > it.wi.Park {
		a.resumePark(ctx, it) // superseded by a parked copy (park.go)
		return
	}
	if it.st.Final != "" {
		a.finalize(ctx, it) // a redelivery of an item that already gave up
		return
	}
	if !a.admitBreaker(ctx, it) {
		return // parked by the job's circuit breaker
	}
	defer func() { a.dirs.done(it.dir, it.failedRun) }()
	a.runSteps(ctx, it)
}

// admit reads a delivery's metadata and work item and checks that the item
// may run here. A delivery it refuses is dealt with (poison, left for a
// newer release, terminated): process returns.
func (a *Agent) admit(ctx context.Context, it *item) bool {
	m := it.m
	md, err := m.Metadata()
	if err != nil {
		a.log.Error().Err(err).Msg("message without metadata; terminated")
		_ = m.Term()
		return false
	}
	it.md = md
	clock.Observe(a.cfg.hooks.Clock, md.Timestamp) // the server's time (docs/design.md, "Clocks")
	if err := wire.DecodeWorkItem(m.Data(), &it.wi); err != nil || it.wi.JobID == "" || it.wi.ItemID == "" {
		// A newer release's item may not decode here: it is left, not poison.
		if a.leaveNewer(it, wire.PeekSchema(m.Data()).Check("the work item")) {
			return false
		}
		a.poison(ctx, it, messages.ReasonPoison, err)
		return false
	}
	if a.leaveNewer(it, it.wi.V.Check("the work item")) {
		return false
	}
	if err := checkWorkItem(a.names, m.Subject(), &it.wi); err != nil {
		a.poison(ctx, it, messages.ReasonPoison, err)
		return false
	}
	if next := m.Headers().Get(wire.HeaderScheduleNext); next != "" && next != wire.ScheduleNextPurge {
		// Agents park with schedules that fire once: a repeating one
		// was published by hand, to run the item over and over.
		a.refuse(it, "fired by a repeating schedule")
		return false
	}
	if v := a.cfg.WorkVerifier; v != nil {
		sig, err := wire.DecodeSig(it.wi.Sig)
		if err == nil {
			err = v.Verify(it.wi.SignedBytes(a.cfg.Pool), sig)
		}
		if err != nil || it.wi.Sig == "" {
			a.refuseUnsigned(ctx, it)
			return false
		}
	}
	return true
}

// refuse drops a delivery no coordinator sent to this pool (a forgery: a
// schedule aimed at the pool by hand) without running it or reporting an
// outcome for the item: it is terminated, logged and counted as
// outcome="refused".
func (a *Agent) refuse(it *item, why string) {
	a.log.Error().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Str("subject", it.m.Subject()).
		Str("reason", why).Msg("work message refused: not sent by the coordinator to this pool")
	a.metrics.items.WithLabelValues(outcomeRefused).Inc()
	_ = it.m.Term()
}

// unsignedDeliveries is the delivery of a work message whose signature
// does not verify at which it is dead-lettered (bad_signature); until
// then it is naked after unsignedDelay, so that another agent of the
// pool, whose verify key may be the right one, can take it.
const (
	unsignedDeliveries = 3
	unsignedDelay      = time.Second
)

// refuseUnsigned refuses a work message whose signature does not verify
// with the agent's key. It runs nothing. A key that does not match the
// coordinator's would otherwise strand every job of the pool without a
// word: after unsignedDeliveries deliveries (or on the consumer's last)
// the item is dead-lettered with reason bad_signature and a dead_lettered
// result, so that its job counts it and its status names the problem; a
// replay after the keys are fixed runs it. Only the pool's agents can put
// a message in the pool's park stream, and they may dead-letter their
// pool's items anyway: a forged message gains them nothing.
func (a *Agent) refuseUnsigned(ctx context.Context, it *item) {
	a.metrics.items.WithLabelValues(outcomeRefused).Inc()
	cause := fmt.Errorf("work message refused: no valid coordinator signature for pool %q (are the coordinator's "+
		"--work-signing-key and the agents' --work-verify-key a pair?)", a.cfg.Pool)
	if it.md.NumDelivered < unsignedDeliveries && !a.lastDelivery(it) {
		a.log.Error().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Str("subject", it.m.Subject()).
			Uint64("num_delivered", it.md.NumDelivered).Err(cause).Msg("work message refused; another agent of the pool may take it")
		a.nakDelay(it, unsignedDelay)
		return
	}
	a.poison(ctx, it, messages.ReasonBadSignature, cause)
}

// outcomeRefused counts the deliveries refuse dropped.
const outcomeRefused = "refused"

// maxObjectName bounds the map-results object a reduce item names: object
// names become subjects, and a subject over the server's control line (4
// KiB) closes the connection.
const maxObjectName = 1024

// checkWorkItem refuses a work message whose body does not belong on its
// subject (<prefix>.work.<pool>.<job>), or that names what no coordinator
// would: the job id and the reduce object go into KV keys and subjects.
func checkWorkItem(names messages.Names, subject string, wi *wire.WorkItem) error {
	if err := messages.ValidToken(wi.JobID); err != nil {
		return fmt.Errorf("job_id: not a job id: %w", err)
	}
	if _, job, ok := wire.ParseWork(names, subject); !ok || job != wi.JobID {
		return fmt.Errorf("job_id %q does not match the subject %q", wi.JobID, subject)
	}
	if r := wi.Reduce; r != nil && (r.ResultsObject == "" || len(r.ResultsObject) > maxObjectName) {
		return fmt.Errorf("reduce.results_object: %d bytes, want 1 to %d", len(r.ResultsObject), maxObjectName)
	}
	return nil
}

// itemKey is the item's key in the items bucket, built on first use: an
// item that succeeds on its first delivery never needs it.
func (a *Agent) itemKey(it *item) string {
	if it.key == "" {
		it.key = wire.ItemKey(a.cfg.Pool, it.wi.JobID, it.wi.ItemID)
	}
	return it.key
}

// loadState reads the item's persisted retry state for this generation.
func (a *Agent) loadState(ctx context.Context, it *item) error {
	if a.states != nil {
		if c, ok := a.states.take(it.md.Sequence.Stream, a.itemKey(it), it.md.NumDelivered); ok {
			// This agent wrote it before the delayed nak of the delivery
			// just before this one (statecache.go).
			it.rev = c.rev
			if c.st.Generation == it.wi.Generation {
				it.st = c.st
			}
			return nil
		}
	}
	e, err := a.items.Get(ctx, a.itemKey(it))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	it.rev = e.Revision()
	var st wire.ItemState
	if err := wire.DecodeItemState(e.Value(), &st); err != nil {
		if err := wire.PeekSchema(e.Value()).Check("the item's retry state"); err != nil {
			return err // an agent of a newer release wrote it: not corrupt
		}
		a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("corrupt item state replaced")
		return nil
	}
	if err := st.V.Check("the item's retry state"); err != nil {
		return err
	}
	// A replay's first delivery with --reset-attempts starts afresh; its
	// parked copies do not.
	if st.Generation == it.wi.Generation && !(it.wi.ResetAttempts && it.md.NumDelivered == 1 && it.wi.Park == 0) {
		it.st = st
	}
	return nil
}

// saveState persists the item's state, fenced by revision: a conflict means
// another agent now holds the item, and this one must step aside.
func (a *Agent) saveState(ctx context.Context, it *item) error {
	data, err := wire.EncodeItemState(&it.st, a.maxPayload())
	if err != nil {
		return err
	}
	rev, err := kvcas.Write(ctx, a.items, a.itemKey(it), data, it.rev)
	if it.rev == 0 && kvcas.IsConflict(err) {
		// State of an earlier generation, or of a run before a
		// coordinator republished the item: take it over.
		var e jetstream.KeyValueEntry
		if e, err = a.items.Get(ctx, it.key); err == nil {
			rev, err = a.items.Update(ctx, it.key, data, e.Revision())
		}
	}
	if err != nil {
		return err
	}
	it.rev = rev
	return nil
}

// isFenced reports a refused compare-and-set of the item's state: another
// agent holds the item now.
func isFenced(err error) bool { return kvcas.IsConflict(err) }

// runSteps runs the item's steps from the persisted step on; a failed
// step run goes down the failure path (failure.go), and so does a run that
// cannot begin: the item's agent_timeout is up, or the step's own circuit
// breaker refuses it.
func (a *Agent) runSteps(ctx context.Context, it *item) {
	if it.st.StartedAt.IsZero() {
		it.st.StartedAt = a.cfg.hooks.Clock.Now().Round(0) // the run begins: it is persisted with the state
	}
	switch it.wi.Phase {
	case "":
		it.deadline = retry.NewDeadline(it.st.StartedAt, it.job.spec.AgentTimeout.D())
	case messages.PhaseSetup:
		it.deadline = setupDeadline(it)
	}
	for first := true; it.st.Step < len(it.set.steps); first = false {
		i := it.st.Step
		if !first && a.holds(it) {
			a.holdBetweenSteps(ctx, it) // paused since the item started (hold.go)
			return
		}
		if it.carry.ok && it.carry.step == i && it.st.StepAttempt == 0 {
			it.st.StepAttempt = it.carry.attempts
		}
		attempt := it.st.StepAttempt + 1
		var (
			out  string
			f    *retry.Failure
			dur  time.Duration
			next bool
		)
		if skip, why := a.skipped(it, i); skip {
			a.stepDone(it, why)
			continue
		}
		switch {
		case it.deadline.Passed(a.cfg.hooks.Clock.Now()):
			if next, out = a.stepRefused(ctx, it, i, attempt, false); !next {
				return
			}
			a.stepDone(it, out)
			continue
		case !a.admitStepBreaker(ctx, it, i):
			if next, out = a.stepRefused(ctx, it, i, attempt, true); !next {
				return
			}
			a.stepDone(it, out)
			continue
		}
		lt, lf, admitted := a.admitLimit(ctx, it, i)
		if !admitted {
			a.settleStepBreaker(ctx, it, retry.OutcomeIgnored) // not run: frees a probe slot
			return                                             // waiting for the step's limit outside the agent
		}
		if f = lf; f == nil {
			f = a.runLimited(ctx, lt, func() *retry.Failure {
				var rf *retry.Failure
				out, rf, dur = a.runFixing(ctx, it, i, attempt) // runStep, and its fallback's reruns (fallback.go)
				if rf == nil {
					rf = a.capture(it, i, out, dur)
				}
				if rf == nil {
					rf = a.onSuccess(ctx, it, i, out, attempt)
				}
				return a.onExitCode(ctx, it, i, out, rf, attempt)
			})
		}
		switch {
		case killed(ctx):
			a.dropKilled(it)
			return
		case ctx.Err() != nil:
			// Shutdown cancelled the step: hand the item back at once, unspent.
			if a.writeLocal(it) {
				_ = it.m.Nak()
			}
			a.metrics.attempts.WithLabelValues("cancelled").Inc()
			return
		case f == nil:
			a.metrics.attemptOK.Inc()
			a.settleStepBreaker(ctx, it, retry.OutcomeSuccess)
			if it.st.Ran == nil {
				it.st.Ran = it.ranBuf[:0]
			}
			it.st.Ran = append(it.st.Ran, messages.StepRun{Step: i, Runs: 1, DurationMS: dur.Milliseconds()})
		default:
			a.metrics.attempts.WithLabelValues("failure").Inc()
			if next, out = a.stepFailed(ctx, it, i, attempt, f, dur); !next {
				return
			}
		}
		a.stepDone(it, out)
	}
	a.settleBreaker(ctx, it, retry.OutcomeSuccess)
	if it.wi.Phase == messages.PhaseSetup {
		a.succeedSetup(ctx, it)
		return
	}
	a.succeed(ctx, it)
}

// freeSlot gives the item's worker slot back, once.
func (it *item) freeSlot() {
	if f := it.free; f != nil {
		it.free = nil
		f()
	}
}

// failureEnds reports whether a failed run of step i ends what this
// delivery runs of the item: its on_failure neither continues nor runs a
// fallback, and its job's on_item_failure runs no custom step. What
// follows (the verdict, the budget claim, the state write and the delayed
// nak, or the dead letter and the result) is bookkeeping.
func (a *Agent) failureEnds(it *item, i int) bool {
	fa := it.set.policies[i].OnFailure()
	return fa.Action != messages.OnFailureContinue && !fa.NeedsFallback() &&
		(it.wi.Phase != "" || it.job.onItem != messages.ItemFailureCustom)
}

// stepDone moves the item to its next step.
func (a *Agent) stepDone(it *item, out string) {
	if it.st.Outputs == nil {
		it.st.Outputs = it.outBuf[:0]
	}
	it.st.Outputs = append(it.st.Outputs, truncate(out, a.cfg.MaxOutputBytes))
	it.st.Step++
	retry.State{}.ApplyTo(&it.st)
}

// nakDelay naks with a delay; never a bare Nak for a failure (docs/jetstream.md §2).
func (a *Agent) nakDelay(it *item, d time.Duration) {
	if !a.writeLocal(it) {
		return // another agent holds the item
	}
	if a.naks != nil {
		a.naks.nak(it.m, d) // on the next tick (nakpace.go)
		return
	}
	if err := nakNow(it.m, d); err != nil {
		a.log.Debug().Err(err).Msg("nak failed; AckWait will redeliver")
	}
}

// succeed reports a finished item. Its state, if any, stays as it is
// until the job's cleanup, or is rewritten as final if the item was parked
// (keepParked).
func (a *Agent) succeed(ctx context.Context, it *item) {
	res := a.result(it, messages.OutcomeSucceeded)
	if n := len(it.st.Outputs); n > 0 {
		res.Output = it.st.Outputs[n-1]
	}
	if a.keepParked(ctx, it) {
		return
	}
	a.report(it, res, false)
}

func (a *Agent) result(it *item, outcome string) *messages.Result {
	now := a.cfg.hooks.Clock.Now()
	attempts := 0
	for _, h := range it.st.History {
		if h.Generation == it.wi.Generation && !h.NotRun {
			attempts++
		}
	}
	it.res = messages.Result{
		JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
		Outcome: outcome, Generation: it.wi.Generation, Phase: it.wi.Phase,
		Attempts: attempts + boolInt(outcome == messages.OutcomeSucceeded), Retries: it.st.Retries,
		Agent: a.cfg.Name, FinishedAt: now, DurationMS: now.Sub(it.t0).Milliseconds(),
	}
	res := &it.res
	if it.set != nil && len(it.set.steps) > 1 {
		res.Steps = stepRuns(it)
	}
	res.ItemRuns = itemRun(it)
	return res
}

// stepRuns is the per-step breakdown of the item's generation: the failed
// runs its history holds and the successful ones its state holds.
func stepRuns(it *item) []messages.StepRun {
	var runs []messages.StepRun
	add := func(step int, ms int64) {
		for i := range runs {
			if runs[i].Step == step {
				runs[i].Runs++
				runs[i].DurationMS = ms
				return
			}
		}
		runs = append(runs, messages.StepRun{Step: step, Runs: 1, DurationMS: ms})
	}
	for _, h := range it.st.History {
		if h.Generation == it.wi.Generation && !h.NotRun {
			add(h.Step, h.DurationMS)
		}
	}
	for _, r := range it.st.Ran {
		add(r.Step, r.DurationMS)
	}
	slices.SortFunc(runs, func(x, y messages.StepRun) int { return cmp.Compare(x.Step, y.Step) })
	return runs
}

// report hands the result to the batcher (batch.go), which publishes it;
// the ack loop acks (or terms) the work message once it is stored.
func (a *Agent) report(it *item, res *messages.Result, term bool) {
	// Encoded to fit: a handler's output may be as large as MaxOutputBytes
	// says, and the item id as large as an item may be.
	data, err := wire.EncodeResult(res, a.maxPayload())
	if err != nil {
		a.log.Error().Err(err).Msg("cannot encode result")
		a.nakDelay(it, time.Second)
		return
	}
	if res.Outcome == messages.OutcomeSucceeded {
		a.metrics.succeeded.Inc()
	} else {
		a.metrics.items.WithLabelValues(res.Outcome).Inc()
		a.presence.outcome(res.Outcome)
	}
	a.traceOutcome(it, res.Outcome)
	a.results <- pendingResult{subject: a.resultSubjectOf(it, res.JobID), data: data, ack: ackTarget{msg: it.m, term: term}}
}

// resultSubjectOf is the subject of job's results from this agent, kept
// on the item's job when it has one.
func (a *Agent) resultSubjectOf(it *item, job string) string {
	j := it.job
	if j == nil || j.id != job {
		return a.names.ResultSubject(a.cfg.Pool, job)
	}
	if s := j.resultSubject.Load(); s != nil {
		return *s
	}
	s := a.names.ResultSubject(a.cfg.Pool, job)
	j.resultSubject.Store(&s)
	return s
}

// attempt builds the history record of a failed attempt.
func (a *Agent) attempt(it *item, step, attempt int, f *retry.Failure, class string, dur time.Duration) messages.Attempt {
	msg := f.Message
	if msg == "" && f.Err != nil {
		msg = f.Err.Error()
	}
	return messages.Attempt{
		Attempt: attempt, Step: step, StepName: it.set.stepName(step), Agent: a.cfg.Name,
		Time: a.cfg.hooks.Clock.Now(), DurationMS: dur.Milliseconds(), ErrorClass: class,
		Message: truncate(msg, maxMessageBytes), ExitCode: f.ExitCode, TimedOut: f.TimedOut,
		Generation: it.wi.Generation,
	}
}

// itemRun is the item's whole-item run (1-based) in a job whose
// error_policy.retry_config re-runs failed items, 0 in others.
func itemRun(it *item) int {
	if it.job == nil || it.job.workflow == nil || it.job.workflow.Retry() == nil || it.wi.Phase != "" {
		return 0
	}
	return max(it.st.ItemRun, 1)
}

func (a *Agent) pushHistory(it *item, att messages.Attempt) {
	it.st.History = append(it.st.History, att)
	if n := len(it.st.History); n > MaxHistory {
		it.st.History = append(it.st.History[:0:0], it.st.History[n-MaxHistory:]...)
		it.st.HistoryDropped += n - MaxHistory
	}
	if it.st.FirstFailure.IsZero() {
		it.st.FirstFailure = att.Time
	}
}

func (a *Agent) dlqEntry(it *item) *messages.DLQEntry {
	hist := append(append([]messages.Attempt(nil), it.wi.History...), it.st.History...)
	return &messages.DLQEntry{
		JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
		Pool: a.cfg.Pool, Payload: it.wi.Payload, CorrelationID: it.wi.CorrelationID,
		Subject: it.m.Subject(), StreamSeq: it.md.Sequence.Stream, Generation: it.wi.Generation,
		ItemRuns: itemRun(it), Attempts: hist, AttemptsDropped: it.wi.HistoryDropped + it.st.HistoryDropped, Reason: it.st.Reason, Error: it.st.Error, ErrorClass: it.st.ErrorClass,
		Signature: retry.Signature(it.st.Error), ReplayCount: it.wi.ReplayCount,
		DeadLetteredAt: a.cfg.hooks.Clock.Now(), Agent: a.cfg.Name,
	}
}

// maxPoisonID bounds the item id a poison message's body may give its
// entry; a longer one is replaced by the message's sequence.
const maxPoisonID = 1024

// poison dead-letters an undecodable message (reason poison) or one of an
// unknown job (job_not_found) so that it is never retried forever, then
// terminates it. A message that is an item of an existing job also gets a
// dead_lettered result, so that the job's counts account for it.
func (a *Agent) poison(ctx context.Context, it *item, reason string, cause error) {
	// The subject (<prefix>.work.<pool>.<job>) names the job; the body of a
	// poison message may name anything.
	job := it.wi.JobID
	if _, j, ok := wire.ParseWork(a.names, it.m.Subject()); ok {
		job = j
	}
	payload := it.wi.Payload
	if len(payload) == 0 || !json.Valid(payload) {
		payload, _ = json.Marshal(string(it.m.Data()))
	}
	msg := "undecodable work message"
	if cause != nil {
		msg = cause.Error()
	}
	itemID := it.wi.ItemID
	if itemID == "" || len(itemID) > maxPoisonID {
		itemID = fmt.Sprintf("seq-%d", it.md.Sequence.Stream) // the raw body is the payload
	}
	entry := &messages.DLQEntry{
		JobID: job, ItemID: itemID, Index: it.wi.Index, Pool: a.cfg.Pool, Payload: payload,
		CorrelationID: it.wi.CorrelationID, Subject: it.m.Subject(), StreamSeq: it.md.Sequence.Stream,
		Reason: reason, Error: truncate(msg, maxMessageBytes), ErrorClass: "error", Signature: retry.Signature(msg),
		DeadLetteredAt: a.cfg.hooks.Clock.Now(), Agent: a.cfg.Name,
	}
	if messages.ValidToken(job) != nil {
		entry.JobID = "unknown"
	}
	a.log.Warn().Str("job_id", job).Uint64("stream_seq", it.md.Sequence.Stream).Str("reason", reason).Str("error", msg).Msg("poison message dead-lettered")
	if err := a.dlq.Write(ctx, entry); err != nil {
		a.log.Warn().Err(err).Msg("dead-letter publish failed; poison message kept, retrying later")
		a.nakDelay(it, 5*time.Second)
		return
	}
	a.metrics.deadLettered.WithLabelValues(reason).Inc()
	if reason == messages.ReasonJobGone || it.wi.JobID != job || it.wi.ItemID == "" {
		// No job to count it (the stream leader said so), or no item a
		// job could count: a message nobody published as a work item.
		_ = it.m.Term()
		return
	}
	// An item of a job leaves the work stream: the job counts it dead
	// lettered, or it would wait for it for ever. Termed once the result
	// is stored, as finalize does.
	res := a.result(it, messages.OutcomeDeadLettered)
	res.Reason, res.Error, res.ErrorClass, res.Signature = reason, entry.Error, entry.ErrorClass, entry.Signature
	a.report(it, res, true)
}

// runStep runs one attempt of step i; f is nil on success. dur is the
// attempt's duration on the agent's clock.
func (a *Agent) runStep(ctx context.Context, it *item, i, attempt int) (out string, f *retry.Failure, dur time.Duration) {
	step := &it.set.steps[i]
	it.ran = shellRan{}
	ctx = a.traceStep(ctx, it, i, attempt)
	obs := a.metrics.handlerSteps
	start := a.cfg.hooks.Clock.Now()
	timeout := it.deadline.Bound(start, a.stepTimeout(step.Timeout.D())) // no run outlasts agent_timeout
	// A write_file step's ${NAME} reads the job's env (jobenv.go).
	f = a.writeEnv(ctx, it, i)
	switch {
	case f != nil:
	case it.set.commands[i].write != nil:
		out, f = a.runWrite(it, it.set.commands[i].write, attempt)
	case it.set.commands[i].foreach != nil:
		obs = a.metrics.shellSteps
		out, f = a.runForeach(ctx, it, it.set.commands[i].foreach, timeout, attempt)
	case step.Shell != "" || step.Claude != "":
		obs = a.metrics.shellSteps
		out, f = a.runShell(ctx, it, it.set.commands[i], timeout, attempt)
	default:
		out, f = a.runHandler(ctx, it, i, step, attempt, timeout)
	}
	dur = a.cfg.hooks.Clock.Now().Sub(start)
	obs.Observe(dur.Seconds())
	a.traceStepRan(it, f)
	return out, f, dur
}

func (a *Agent) shellVars(it *item, attempt int) shell.Vars {
	v := shell.Vars{Item: it.wi.Payload, ItemID: it.wi.ItemID, JobID: it.wi.JobID, Attempt: attempt, Map: it.mv,
		ItemIndex: it.wi.Index, ItemTotal: it.job.items, Captures: itemCaptures(it), LookupJobEnv: lookupIn(jobEnviron(it))}
	if n := len(it.st.Outputs); n > 0 {
		v.Last, v.HasLast = strings.TrimRight(it.st.Outputs[n-1], "\n"), true
	}
	if it.justRan != nil {
		v.Last, v.HasLast = strings.TrimRight(*it.justRan, "\n"), true
	}
	return v
}

// stepTimeout is a step's own timeout, or the agent's default.
func (a *Agent) stepTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return a.cfg.StepTimeout
}

// runShell runs command c for the item. Its environment is the agent's
// variables that Config.StepEnv allows, then the job's env, then the
// item's variables, then extraEnv: a later entry wins, so neither the job
// nor anything else can change ITEM_JSON, ITEM_ID, JOB_ID or ATTEMPT, and
// ${env.NAME} reads the same environment, never the agent's own.
func (a *Agent) runShell(ctx context.Context, it *item, c command, timeout time.Duration, attempt int, extraEnv ...string) (string, *retry.Failure) {
	if c.err != nil {
		return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("the command cannot run safely: %w", c.err))}
	}
	if err := a.itemEnv(ctx, it); err != nil {
		return "", &retry.Failure{Err: retry.Permanent(err)}
	}
	dir, err := a.stepDir(it, c.workingDir)
	if err != nil {
		return "", &retry.Failure{Err: fmt.Errorf("the item's directory: %w", err)}
	}
	vars := a.shellVars(it, attempt)
	vars.ItemWorkdir = cmp.Or(it.dir, dir)
	jobEnv := it.job.env
	if it.env != nil {
		jobEnv = it.env.Env
	}
	env := make([]string, 0, len(a.stepEnv)+len(jobEnv)+len(c.env)+9+len(extraEnv))
	if !c.clearEnv {
		env = append(env, a.stepEnv...)
	}
	env = append(env, jobEnv...)
	env = append(env, c.env...) // the step's own env
	if it.env != nil {
		env = append(env, it.env.Secrets...) // over the step's env, as Prodigy orders them
	}
	env = append(env, vars.Environ()...)
	if it.dir != "" {
		env = append(env, "ITEM_WORKDIR="+it.dir)
	}
	env = append(env, extraEnv...)
	env = append(env, tracing.Env(ctx)...) // TRACEPARENT of the step's span
	vars.LookupEnv = lookupIn(env)
	var script string
	if c.claude != nil {
		if a.claude == "" {
			return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("this agent cannot run claude steps: no %q on its PATH (--claude-command)", a.cfg.ClaudeCommand))}
		}
		prompt, err := claudePrompt(c.claude, vars)
		if err != nil {
			return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("the prompt: %w", err))}
		}
		script = a.claude
		env = append(env, claudeEnvCommand+"="+a.claudePath, claudeEnvPrompt+"="+prompt)
	} else {
		var hdoc []string
		if script, hdoc, err = c.script.ExpandEnv(vars); err != nil {
			return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("expanding the command: %w", err))}
		}
		env = append(env, hdoc...) // the values of references in here-documents (JETFLEET_HD*)
	}
	var head0 string
	if c.commitRequired {
		head0, _ = gitHead(ctx, dir, env)
	}
	sc := shell.Command{
		Script: script, Env: env, Dir: dir, Timeout: a.stepTimeout(timeout), KillGrace: a.cfg.KillGrace,
		Heartbeat: func() { _ = it.m.InProgress() }, HeartbeatInterval: a.hb,
	}
	if c.capture {
		sc.TailBytes = wire.MaxCaptureBytes + 1 // one more: a capture over the bound is seen, never cut
	}
	res := shell.Run(ctx, sc)
	maskResult(stepMasker(it, c), &res) // before anything reads the output
	it.ran = shellRan{stderr: res.Stderr, exitCode: res.ExitCode, stdoutBytes: res.StdoutBytes}
	if res.Failed() {
		it.ran.stdout = res.Stdout // ${shell.output} of its fallback
	}
	if res.Killed > 0 {
		a.metrics.leftoversKilled.Add(float64(res.Killed))
		a.log.Info().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("processes", res.Killed).
			Msg("killed the processes a shell step left running")
	}
	if !res.Failed() {
		if c.commitRequired {
			if f := commitMade(ctx, dir, env, head0); f != nil {
				return "", f
			}
		}
		return res.Stdout, nil
	}
	f := &retry.Failure{Message: res.Message(), Stderr: res.Stderr, TimedOut: res.TimedOut}
	if res.Err == nil && res.Signal == 0 && !res.TimedOut && !res.Cancelled {
		code := res.ExitCode
		f.ExitCode = &code
	}
	return "", f
}

// stepDir is the directory a shell step runs in: the map item's own
// (made on its first step), or under it (or elsewhere, absolute) the
// step's working_dir; a reduce item's steps run in WorkDir.
func (a *Agent) stepDir(it *item, workingDir string) (string, error) {
	if it.wi.Phase == messages.PhaseReduce {
		return joinDir(a.cfg.WorkDir, workingDir), nil
	}
	if it.dir == "" {
		d, err := a.dirs.make(it.wi.JobID, it.wi.ItemID)
		if err != nil {
			return "", err
		}
		it.dir = d
	}
	return joinDir(it.dir, workingDir), nil
}

func joinDir(base, dir string) string {
	if dir == "" || filepath.IsAbs(dir) {
		return cmp.Or(dir, base)
	}
	return filepath.Join(base, dir)
}

// lookupIn resolves ${env.NAME} in a step's environment: the last entry
// for a name wins, as in the process's.
func lookupIn(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
}

// runCustom runs error_policy.on_item_failure's custom step with the failed
// item: a shell command (with FAILURE_REASON and FAILURE_ERROR in its
// environment besides the usual ITEM_JSON, ITEM_ID, JOB_ID) or a handler
// (with Call.Cause set). A nil error means the custom step took the item
// over: it is recorded as failed, without a dead letter.
func (a *Agent) runCustom(ctx context.Context, it *item, reason string, cause error) error {
	step := it.job.workflow.Custom()
	if step == nil {
		return errors.New("no custom step")
	}
	msg := ""
	if cause != nil {
		msg = truncate(cause.Error(), maxMessageBytes)
	}
	var f *retry.Failure
	if step.Shell != "" {
		_, f = a.runShell(ctx, it, it.job.custom, step.Timeout.D(), 1, "FAILURE_REASON="+reason, "FAILURE_ERROR="+msg)
	} else {
		_, f = a.invokeHandler(ctx, it, step, a.stepTimeout(step.Timeout.D()), &Call{
			JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
			StepName: "on_item_failure", Attempt: 1, Item: it.wi.Payload, With: step.With, Cause: cause,
		})
	}
	if f != nil {
		return f.Error()
	}
	return nil
}

func (a *Agent) runHandler(ctx context.Context, it *item, i int, step *messages.Step, attempt int, timeout time.Duration) (string, *retry.Failure) {
	return a.invokeHandler(ctx, it, step, timeout, &Call{
		JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
		Step: i, StepName: it.set.stepName(i), Attempt: attempt, Item: it.wi.Payload, With: step.With,
		Map: mapResults(it.mv),
	})
}

// invokeHandler runs step's handler with call, under timeout and with
// heartbeats.
func (a *Agent) invokeHandler(ctx context.Context, it *item, step *messages.Step, timeout time.Duration, call *Call) (string, *retry.Failure) {
	fn, ok := a.handler(step.Handler)
	if !ok {
		return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("no handler %q registered on agent %s (pool %s)", step.Handler, a.cfg.Name, a.cfg.Pool))}
	}
	now := time.Now()
	hctx, cancel := withStepDeadline(ctx, now.Add(timeout))
	defer cancel()
	var v any
	var err error
	it.hb.begin(it.m, now)
	v, err = fn(hctx, call)
	it.hb.end()
	if err != nil {
		timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		return "", &retry.Failure{Err: err, TimedOut: timedOut}
	}
	return outputText(v), nil
}

func outputText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// truncate keeps the tail of s, where a command's error usually is: its
// last n bytes at most, cut on a rune boundary so that a valid UTF-8 s
// stays valid.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - max(n, 0)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
