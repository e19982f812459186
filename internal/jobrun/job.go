package jobrun

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Outcome codes kept per item index.
const (
	ocNone uint8 = iota
	ocSucceeded
	ocFailed
	ocDeadLettered
	ocSkipped
	ocNotRun
	// ocLate is not_run with a late result logged (late_results: log):
	// counted as not_run, and further copies of the result are ignored.
	ocLate
)

var outcomeCodes = map[string]uint8{
	messages.OutcomeSucceeded:    ocSucceeded,
	messages.OutcomeFailed:       ocFailed,
	messages.OutcomeDeadLettered: ocDeadLettered,
	messages.OutcomeSkipped:      ocSkipped,
	messages.OutcomeNotRun:       ocNotRun,
}

// Bounds of a job's error report (see countError).
const (
	// maxErrorItems bounds the item ids listed per error signature, and
	// maxErrorItemID the length of one (longer ones are not listed).
	maxErrorItems  = 10
	maxErrorItemID = 256
	// maxErrorMessage bounds the example message of a signature.
	maxErrorMessage = 1024
	// trackedSignatures times ErrorSignatures signatures are counted in
	// memory, so that one frequent late in a job can still make the report.
	trackedSignatures = 10
)

// jobRunner drives one unfinished job: it publishes the job's items,
// follows their results, applies the job's policies (error_policy,
// best_effort), runs the reduce phase, and then lingers for late results.
//
// Its phase (phase.go) says where the job is: replaying its results,
// mapping, reducing, lingering, exited; lifecycle.fire is the only place
// it changes. The map phase runs until every item has an outcome, a policy
// stops it, best-effort completes it, its deadline passes, or it is
// cancelled; items without an outcome then count as not_run. With reduce
// steps (and unless cancelled) the reduce item runs next; its outcome
// completes the job. A DLQ replay may reopen a finished job for the
// replayed items (docs/jobs.md).
//
// Three goroutines touch it: the run loop (run), the results consumer
// (apply, results.go: the catch-up, then the hub) and the publisher (publisher.go); API calls read
// snapshots and ask for stops. mu guards everything below it.
type jobRunner struct {
	c   *Coordinator
	hub *resultsHub // the leadership term's results (results.go)
	id  string
	log zerolog.Logger

	workflow  *retry.Workflow  // nil if the spec's error_policy does not compile
	collector *retry.Collector // error_collection events
	lateMode  string           // what results after the map phase ended do

	mu       sync.Mutex
	rec      wire.JobRecord
	rev      uint64         // the record's revision in KV, written by flush only
	outcome  []uint8        // per item index
	gens     map[int64]int  // generation of replayed items (absent = 0)
	reopened map[int64]bool // replayed items awaiting their new outcome
	errs     map[string]*trackedError
	// errsOther counts failed items whose signature is not in errs; errSeq
	// numbers the failures counted.
	errsOther int64
	errSeq    uint64
	dirty     bool      // the record changed since the last write
	life      lifecycle // the phase and what goes with it (phase.go)
	pending   []func()
	endSnap   messages.JobStatus // counts when the map phase last ended
	// kill is set by a cancel with kill: the map_ended event that follows
	// tells the agents to terminate the job's running steps.
	kill bool
	// completeGroups counts the groups whose GroupStatus.Complete() holds,
	// kept by count so a result costs O(1) however many groups there are.
	completeGroups int
	// leftNewer is set once a result of a newer schema version was left
	// uncounted (schema.go).
	leftNewer bool

	// pools says which pool may report each item's outcome (origin.go);
	// set once by loadPools, then read without the lock.
	pools      *itemPools
	poolsReady chan struct{} // closed once pools is set

	progress chan struct{} // a result arrived (cap 1, non-blocking send)
	caughtUp chan struct{} // closed when the results replay caught up
	wake     chan struct{} // the phase changed (cap 1): the run loop looks
	exited   chan struct{} // closed when run returns
	stopCh   chan stopRequest
}

type stopRequest struct {
	state, reason string
	kill          bool // a cancel with kill: agents terminate running steps
	reply         chan messages.JobStatus
}

func newJobRunner(c *Coordinator, rec wire.JobRecord, rev uint64) *jobRunner {
	r := &jobRunner{
		c:          c,
		rev:        rev,
		id:         rec.Status.ID,
		log:        c.log.With().Str("job_id", rec.Status.ID).Logger(),
		rec:        rec,
		outcome:    make([]uint8, rec.Status.Items),
		gens:       map[int64]int{},
		reopened:   map[int64]bool{},
		errs:       map[string]*trackedError{},
		progress:   make(chan struct{}, 1),
		poolsReady: make(chan struct{}),
		caughtUp:   make(chan struct{}),
		wake:       make(chan struct{}, 1),
		exited:     make(chan struct{}),
		stopCh:     make(chan stopRequest),
		lateMode:   messages.LateResultsUpdate,
	}
	if rec.Spec != nil {
		w, err := retry.NewWorkflow(rec.Spec.ErrorPolicy)
		if err != nil {
			r.log.Error().Err(err).Msg("error_policy does not compile; policies not applied")
		} else {
			r.workflow = w
			r.collector = w.NewCollector()
		}
		if be := rec.Spec.BestEffort; be != nil && be.LateResults != "" {
			r.lateMode = be.LateResults
		}
	}
	// Counts are rebuilt from the results stream; the stored ones are only a
	// snapshot for readers.
	st := &r.rec.Status
	st.Succeeded, st.Failed, st.DeadLettered, st.Skipped, st.NotRun, st.Retries = 0, 0, 0, 0, 0, 0
	st.ItemRetries = 0
	st.Budget.DeniedJob, st.Budget.DeniedItem = 0, 0
	st.LateResults = 0
	st.Published = rec.Cursor
	st.Errors, st.ErrorsOther = nil, 0
	for g, gs := range st.Groups {
		st.Groups[g] = messages.GroupStatus{Items: gs.Items}
	}
	if st.Phase == "" {
		st.Phase = messages.PhaseMap
	}
	return r
}

// run publishes and tracks until the job ends and its linger window
// passes, or ctx is cancelled (a coordinator shutdown, which leaves an
// unfinished job to be resumed).
//
// The loop does what a phase change asks (loopDue): when the map phase
// ends it stops the publisher, purges the queue, publishes the map-end
// events and starts the reduce; when the job finishes it publishes
// JobCompleted and starts the late-result wait; a reopen ends that wait.
func (r *jobRunner) run(ctx context.Context) {
	defer close(r.exited)
	defer r.exit() // if run returns another way than below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	r.markStarted()
	r.loadPools(ctx)
	defer r.track(ctx, r.hub)()

	pub := r.startPublishing(ctx)
	defer func() { pub.cancel() }() // the publisher of the moment (followPause)
	tick := newStatusTimer(r.c.cfg.StatusInterval)
	defer tick.stop()
	var (
		due      = newLoopDue()
		late     = newLateWait(r.c.cfg.LateResultWindow)
		reducers sync.WaitGroup
	)
	defer reducers.Wait() // after cancel (deferred later, runs first)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			r.exit()
			pub.stop()
			if !errors.Is(context.Cause(ctx), lease.ErrLost) {
				// A leader stopping writes its last counts; a deposed one
				// writes nothing (its successor owns the record).
				r.flush(context.Background())
			}
			return
		case err := <-pub.result:
			pub.result = nil
			if err != nil && !errors.Is(err, context.Canceled) {
				r.log.Error().Err(err).Msg("publishing stopped")
				r.endMap(messages.StateFailed, "input_error: "+err.Error())
			}
		case req := <-r.stopCh:
			if r.stopMap(req) {
				// The map phase had ended: no map_ended event follows,
				// so a kill of a job cancelled before is sent now.
				st := r.snapshot().Status
				r.c.killRunning(r.id, &st)
			}
			pub.stop()
			r.purgeQueued(ctx)
			r.flush(ctx)
			req.reply <- r.snapshot().Status
		case <-r.wake:
		case <-tick.c():
			tick.fired()
			r.tick()
			r.flush(ctx)
		case <-late.passed():
			if r.lateWindowPassed(late) {
				r.flush(context.Background())
				return
			}
		}
		r.runPending()

		r.mu.Lock()
		life := r.life
		r.mu.Unlock()
		mapEnd, finish := due.next(life)
		if mapEnd {
			pub.stop()
			r.purgeQueued(ctx)
			r.afterMapEnd()
			if life.phase == phaseReducing {
				reducers.Go(func() { r.startReduce(ctx) })
			}
		}
		if mapEnd {
			// Before the finished state is written: whoever sees the job
			// finished sees its park streams without its retries, and
			// nothing published there afterwards is purged by this job.
			r.purgeParked(ctx)
		}
		if finish {
			r.flush(ctx)
			st := r.snapshot().Status
			r.c.event(r.id, messages.JobCompletedEvent(st))
			r.c.metrics.jobsFinished.WithLabelValues(st.State).Inc()
			late.start()
		}
		if life.phase != phaseLingering && late.waiting() {
			late.cancel() // reopened by a replay
		}
		// After the map-end purges: a job that ended paused drops its pause
		// then, and its held copies are gone by then.
		pub = r.followPause(ctx, pub)
		tick.arm(r.needsTick())
	}
}

// needsTick reports whether the record has changes to write or a
// deadline to watch: only then does the run loop tick every
// StatusInterval (statusTimer).
func (r *jobRunner) needsTick() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dirty || (r.rec.Deadline != nil && r.rec.Status.MapReason == "")
}

// statusIdle is how often the run loop of a job with nothing to write
// looks anyway.
const statusIdle = 10 * time.Second

// statusTimer paces a runner's status writes: every interval while the
// runner has something to write or a deadline (arm(true)), every
// statusIdle otherwise, so that 10,000 open jobs that wait cost almost no
// CPU. Whatever makes the record dirty wakes the run loop (wakeUp), which
// arms it. Only the run loop uses it.
type statusTimer struct {
	t        *time.Timer
	interval time.Duration
	armed    time.Duration // the delay it runs with; 0 after it fired
}

func newStatusTimer(interval time.Duration) *statusTimer {
	return &statusTimer{t: time.NewTimer(interval), interval: interval, armed: interval}
}

func (s *statusTimer) c() <-chan time.Time { return s.t.C }
func (s *statusTimer) fired()              { s.armed = 0 }
func (s *statusTimer) stop()               { s.t.Stop() }

// arm makes sure the timer runs: within interval when busy, statusIdle
// otherwise. A timer already running as soon as asked is left alone.
func (s *statusTimer) arm(busy bool) {
	d := statusIdle
	if busy {
		d = s.interval
	}
	if s.armed != 0 && s.armed <= d {
		return
	}
	s.t.Reset(d) // Go 1.23+: Reset drops a pending fire
	s.armed = d
}

// markStarted moves a pending job to running.
func (r *jobRunner) markStarted() {
	r.mu.Lock()
	st := &r.rec.Status
	if st.State != messages.StatePending {
		r.mu.Unlock()
		return
	}
	now := r.c.cfg.hooks.Clock.Now()
	st.State, st.StartedAt = messages.StateRunning, &now
	r.dirty = true
	items := st.Items
	r.mu.Unlock()
	r.c.event(r.id, messages.JobStartedEvent{Items: items})
}

// fireLocked moves the runner's lifecycle by t and keeps the record's
// phase in step. It reports false, changing nothing, when the lifecycle
// refuses t (the job is not where t applies).
func (r *jobRunner) fireLocked(t trigger) bool {
	if r.life.fire(t) != nil {
		return false
	}
	r.syncPhaseLocked()
	return true
}

// syncPhaseLocked writes the runner's phase into the record's.
func (r *jobRunner) syncPhaseLocked() {
	if p := recordPhase(r.life.phase); p != "" {
		r.rec.Status.Phase = p
	}
}

// lateWindowPassed decides, against a concurrent hold, what a late-result
// window that passed means: another window, or the runner's exit (true).
func (r *jobRunner) lateWindowPassed(late *lateWait) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return late.decide(r.life.windowPassed())
}

// exit marks the runner as exiting: a hold fails from now on, and
// nothing more is decided.
func (r *jobRunner) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fireLocked(shutdown) // refused when it already exited
}

// hold keeps a lingering runner for one more window because a DLQ replay
// is about to reopen the job. It fails when run is returning.
func (r *jobRunner) hold() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.life.hold()
}

// wakeUp nudges the run loop (non-blocking).
func (r *jobRunner) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// defer runs f after the lock is released (events, logs with I/O).
func (r *jobRunner) deferLocked(f func()) { r.pending = append(r.pending, f) }

func (r *jobRunner) runPending() {
	r.mu.Lock()
	fs := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// replayed says whether the runner has replayed the job's results to the
// end, so that its counts are at least those of the job's record.
func (r *jobRunner) replayed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.life.live
}

// apply records one result, de-duplicated by item index and generation.
func (r *jobRunner) apply(res *messages.Result) {
	if res.Phase == messages.PhaseReduce {
		r.applyReduce(res)
		return
	}
	if res.Phase == messages.PhaseSetup {
		return // the setup runner read it before the job's items existed (setup.go)
	}
	if res.Outcome == messages.OutcomeReopened {
		r.applyReopen(res)
		return
	}
	code, ok := outcomeCodes[res.Outcome]
	if !ok || code == ocNotRun {
		r.log.Warn().Str("outcome", res.Outcome).Msg("result with unknown outcome ignored")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.rec.Status
	if res.Index < 0 || res.Index >= st.Items {
		r.log.Warn().Int64("index", res.Index).Msg("result for an index outside the job ignored")
		return
	}
	if res.Generation < r.gens[res.Index] {
		return // a run of an earlier generation, overtaken by a replay
	}
	prev := r.outcome[res.Index]
	if prev != ocNone && res.Reason == messages.ReasonBadSignature && !r.reopened[res.Index] {
		// The pool's agents could not verify a work message of an item
		// that has its outcome: not the coordinator's message (only an
		// item still waiting for one, a stranded one, is counted).
		r.log.Warn().Int64("index", res.Index).Str("item_id", res.ItemID).Msg("refused unsigned work message of a finished item ignored")
		return
	}
	if prev != ocNone {
		newer := res.Generation > r.gens[res.Index]
		lateNotRun := prev == ocNotRun && res.Generation == r.gens[res.Index]
		if !newer && !lateNotRun {
			return // a duplicate run's result, or a late one already logged
		}
		if lateNotRun && !r.lateResultLocked(res) {
			return // logged, not aggregated
		}
		r.count(prev, res, -1)
	}
	r.outcome[res.Index] = code
	if res.Generation > 0 {
		r.gens[res.Index] = res.Generation
	}
	if res.Generation == r.gens[res.Index] {
		delete(r.reopened, res.Index)
	}
	r.count(code, res, +1)
	r.dirty = true
	if code == ocFailed || code == ocDeadLettered {
		r.collectLocked(res)
	}
	r.checkLocked(res)
	select { // after the check: a publisher woken now sees a stop
	case r.progress <- struct{}{}:
	default:
	}
}

// count adds (sign=+1) or removes (-1) an outcome from the status.
func (r *jobRunner) count(code uint8, res *messages.Result, sign int64) {
	st := &r.rec.Status
	switch code {
	case ocSucceeded:
		st.Succeeded += sign
	case ocFailed:
		st.Failed += sign
	case ocDeadLettered:
		st.DeadLettered += sign
	case ocSkipped:
		st.Skipped += sign
	case ocNotRun, ocLate:
		st.NotRun += sign
	}
	if sign > 0 {
		st.Retries += int64(res.Retries)
		st.ItemRetries += int64(max(res.ItemRuns-1, 0))
	}
	switch res.Reason {
	case messages.ReasonJobBudget:
		st.Budget.DeniedJob += sign
	case messages.ReasonItemBudget:
		st.Budget.DeniedItem += sign
	}
	// A group's counts are of items with an outcome: not_run items were
	// never added (endMapLocked, goLive), so a late result or a reopen
	// that replaces not_run takes nothing away from the group.
	if st.Groups != nil && code != ocNotRun && code != ocLate {
		g := st.Groups[res.Group]
		was := g.Complete()
		g.Done += sign
		switch code {
		case ocSucceeded:
			g.Succeeded += sign
		case ocFailed, ocDeadLettered:
			g.Failed += sign
		}
		st.Groups[res.Group] = g
		switch now := g.Complete(); {
		case now && !was:
			r.completeGroups++
		case !now && was:
			r.completeGroups--
		}
	}
	if sign > 0 && (code == ocFailed || code == ocDeadLettered) && res.Signature != "" {
		r.countError(res)
	}
}

// countError adds a failed item to the error report. The report keeps the
// ErrorSignatures most frequent signatures; memory holds at most
// trackedSignatures times that many: a new signature then takes the place
// of one seen only once (if any; its count moves to errorsOther), or is
// counted in errorsOther itself. Summed, the report's counts and
// errors_other are always every failed item with a signature.
func (r *jobRunner) countError(res *messages.Result) {
	r.errSeq++
	e := r.errs[res.Signature]
	if e == nil {
		if len(r.errs) >= trackedSignatures*r.c.cfg.ErrorSignatures && !r.evictOnce() {
			r.errsOther++
			return
		}
		e = &trackedError{sum: messages.ErrorSummary{Signature: res.Signature, Class: res.ErrorClass, Message: wire.Clip(res.Error, maxErrorMessage)}}
		r.errs[res.Signature] = e
	}
	e.sum.Count++
	e.seen = r.errSeq
	if len(e.sum.Items) < maxErrorItems && len(res.ItemID) <= maxErrorItemID {
		e.sum.Items = append(e.sum.Items, res.ItemID)
	}
}

// evictOnce drops the tracked signature seen once that was seen longest
// ago, counting it in errorsOther; it reports whether there was one. A
// signature that recurs within trackedSignatures*ErrorSignatures new ones
// is therefore never dropped.
func (r *jobRunner) evictOnce() bool {
	victim := ""
	var oldest uint64
	for sig, e := range r.errs {
		if e.sum.Count == 1 && (victim == "" || e.seen < oldest) {
			victim, oldest = sig, e.seen
		}
	}
	if victim == "" {
		return false
	}
	delete(r.errs, victim)
	r.errsOther++
	return true
}

// trackedError is a signature of the error report being counted.
type trackedError struct {
	sum  messages.ErrorSummary
	seen uint64 // when it was last counted (errSeq)
}

// snapshot copies the record with the error report filled in.
func (r *jobRunner) snapshot() wire.JobRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	st := &rec.Status
	copyStatus(st)
	asOf := r.c.cfg.hooks.Clock.Now()
	st.AsOf, st.Source = &asOf, ""
	st.Errors = make([]messages.ErrorSummary, 0, len(r.errs))
	for _, e := range r.errs {
		st.Errors = append(st.Errors, e.sum)
	}
	sortErrors(st.Errors)
	st.ErrorsOther = r.errsOther
	if n := r.c.cfg.ErrorSignatures; len(st.Errors) > n {
		for _, e := range st.Errors[n:] {
			st.ErrorsOther += e.Count
		}
		st.Errors = st.Errors[:n]
	}
	for i := range st.Errors {
		st.Errors[i].Items = append([]string(nil), st.Errors[i].Items...)
	}
	return rec
}

// copyStatus replaces st's maps and pointers by copies, so that st can be
// read after the runner's lock is released.
func copyStatus(st *messages.JobStatus) {
	if st.Groups != nil {
		gs := make(map[string]messages.GroupStatus, len(st.Groups))
		for g, v := range st.Groups {
			gs[g] = v
		}
		st.Groups = gs
	}
	if st.BestEffort != nil {
		be := *st.BestEffort
		st.BestEffort = &be
	}
	if st.Reduce != nil {
		rd := *st.Reduce
		st.Reduce = &rd
	}
	if st.Breaker != nil {
		b := *st.Breaker
		st.Breaker = &b
	}
}

// flush writes the record if it changed.
func (r *jobRunner) flush(ctx context.Context) {
	r.mu.Lock()
	dirty := r.dirty
	r.dirty = false
	r.mu.Unlock()
	if !dirty {
		return
	}
	rec := r.snapshot()
	r.c.fillBudget(ctx, &rec)
	r.mu.Lock()
	rev := r.rev
	r.mu.Unlock()
	nrev, ok, err := r.c.store.update(ctx, &rec, rev)
	if err == nil && !ok {
		if !r.c.IsLeader() {
			err = errRecordChanged
		} else {
			// Another write since ours: a deposed leader's last one that
			// was in flight when it stepped down. This runner's counts,
			// rebuilt from the results, are the job's: write them over it.
			r.log.Warn().Uint64("revision", rev).Msg("job record changed under the runner; rewriting it")
			nrev, err = r.c.store.putRev(ctx, &rec)
		}
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("job record write failed; will retry")
		r.mu.Lock()
		r.dirty = true
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.rev = nrev
	r.mu.Unlock()
}

// inFlight is the number of published items without an outcome.
func (r *jobRunner) inFlight() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.Status.Published - r.rec.Status.Done()
}

func (r *jobRunner) ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.life.ended()
}

func (r *jobRunner) isDone(idx int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome[idx] != ocNone
}

// advance moves the cursor and the published count after acknowledged publishes.
func (r *jobRunner) advance(cursor, published int64) {
	r.mu.Lock()
	if cursor > r.rec.Cursor {
		r.rec.Cursor = cursor
	}
	r.rec.Status.Published += published
	r.dirty = true
	r.mu.Unlock()
	r.wakeUp() // the run loop writes the record
}

// purgeQueued removes the job's queued work messages (stop or cancel).
func (r *jobRunner) purgeQueued(ctx context.Context) {
	if err := r.purge(ctx, r.c.names.WorkStream(), r.c.names.WorkSubject("*", r.id)); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Msg("purging queued items failed; agents will skip them")
	}
}

// purgeParked removes the job's parked retries once its map phase ended
// (they count as not_run), so that they do not come back when due.
func (r *jobRunner) purgeParked(ctx context.Context) {
	rec := r.snapshot()
	for _, pool := range jobPools(&rec) {
		// A purge cut short by the coordinator stopping is not worth a
		// warning: agents skip the job's items when due all the same.
		if err := r.purge(ctx, r.c.names.ParkStream(pool), wire.JobParkFilters(r.c.names, pool, r.id)...); err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Str("pool", pool).Msg("purging parked items failed; agents will skip them when due")
		}
	}
}

// jobPools are the pools rec's items run on: its spec's, and those its
// groups are routed to. Each has its own park stream.
func jobPools(rec *wire.JobRecord) []string {
	var pools []string
	if rec.Spec != nil {
		pools = append(pools, cmp.Or(rec.Spec.Pool, messages.DefaultPool))
	}
	for _, p := range rec.Routes {
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	return pools
}

// purge removes the messages on subjects from stream name, through the
// coordinator's one purge (purgeSubject, which skips an empty subject).
func (r *jobRunner) purge(ctx context.Context, name string, subjects ...string) error {
	for _, s := range subjects {
		if err := r.c.purgeSubject(ctx, name, s); err != nil {
			return err
		}
	}
	return nil
}

// stopMap ends the map phase for req, with the kill it asks for. It
// reports whether req asks for a kill that is still to be sent: the map
// phase had already ended, as a cancel.
func (r *jobRunner) stopMap(req stopRequest) (killNow bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life.ended() {
		return req.kill && r.rec.Status.MapReason == messages.CompletionCancelled
	}
	r.kill = req.kill
	r.endMapLocked(req.state, req.reason)
	return false
}

// stop ends the job as req says (a cancel).
func (r *jobRunner) stop(ctx context.Context, req stopRequest) (messages.JobStatus, error) {
	req.reply = make(chan messages.JobStatus, 1)
	if r.ended() {
		return r.snapshot().Status, errJobFinished
	}
	select {
	case r.stopCh <- req:
	case <-r.exited:
		return r.snapshot().Status, errJobFinished
	case <-ctx.Done():
		return messages.JobStatus{}, ctx.Err()
	}
	select {
	case st := <-req.reply:
		return st, nil
	case <-ctx.Done():
		return messages.JobStatus{}, ctx.Err()
	}
}

var errJobFinished = errors.New("coordinator: job already finished")

// errRecordChanged: a runner's record was written by someone else, and
// this coordinator no longer leads.
var errRecordChanged = errors.New("coordinator: job record changed under a runner that no longer leads")
