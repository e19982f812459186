package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
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
// Life of a job (docs/jobs.md): the map phase runs until every item has an
// outcome, a policy stops it, best-effort completes it, its deadline
// passes, or it is cancelled; items without an outcome then count as
// not_run. With reduce steps (and unless cancelled) the reduce item runs
// next; its outcome completes the job. A DLQ replay may reopen a finished
// job for the replayed items.
type jobRunner struct {
	c   *Coordinator
	id  string
	log zerolog.Logger

	workflow  *retry.Workflow  // nil if the spec's error_policy does not compile
	collector *retry.Collector // error_collection events
	lateMode  string           // what results after the map phase ended do

	mu       sync.Mutex
	rec      messages.JobRecord
	outcome  []uint8        // per item index
	gens     map[int64]int  // generation of replayed items (absent = 0)
	reopened map[int64]bool // replayed items awaiting their new outcome
	errs     map[string]*trackedError
	// errsOther counts failed items whose signature is not in errs; errSeq
	// numbers the failures counted.
	errsOther int64
	errSeq    uint64
	dirty     bool
	live      bool // the results replay caught up: policies apply
	mapEnded  bool // the map phase ended (items left are not_run)
	terminal  bool // the job is finished (a reopen may undo it)
	epoch     int  // bumped by every map end and reopen
	held      bool // a reopen is coming: linger once more (see hold)
	exiting   bool // run is returning; hold fails
	pending   []func()
	endSnap   messages.JobStatus // counts when the map phase last ended
	// completeGroups counts the groups whose GroupStatus.Complete() holds,
	// kept by count so a result costs O(1) however many groups there are.
	completeGroups int

	// pools says which pool may report each item's outcome (origin.go);
	// set once by loadPools, then read without the lock.
	pools      *itemPools
	poolsReady chan struct{} // closed once pools is set

	progress chan struct{} // a result arrived (cap 1, non-blocking send)
	caughtUp chan struct{} // results replay reached the end seen at start
	wake     chan struct{} // map ended, job finished or reopened (cap 1)
	exited   chan struct{} // closed when run returns
	stopCh   chan stopRequest
	cancel   context.CancelFunc
}

type stopRequest struct {
	state, reason string
	reply         chan messages.JobStatus
}

func newJobRunner(c *Coordinator, rec messages.JobRecord) *jobRunner {
	r := &jobRunner{
		c:          c,
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
func (r *jobRunner) run(ctx context.Context) {
	defer close(r.exited)
	ctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	defer cancel()

	if r.rec.Status.State == messages.StatePending {
		now := r.c.cfg.Clock.Now()
		r.mu.Lock()
		r.rec.Status.State = messages.StateRunning
		r.rec.Status.StartedAt = &now
		r.dirty = true
		r.mu.Unlock()
		r.c.event(r.id, messages.EventStarted, "JobStarted", map[string]any{"items": r.rec.Status.Items})
	}
	r.loadPools(ctx)
	cc, err := r.track(ctx)
	if err != nil {
		r.log.Error().Err(err).Msg("cannot follow results; job left for the next coordinator start")
		return
	}
	defer cc.Stop()

	pubDone := make(chan error, 1)
	pubCtx, pubCancel := context.WithCancel(ctx)
	defer pubCancel()
	go func() { pubDone <- r.publishAll(pubCtx) }()
	stopPublishing := func() {
		pubCancel()
		if pubDone != nil {
			<-pubDone
			pubDone = nil
		}
	}

	ticker := time.NewTicker(r.c.cfg.StatusInterval)
	defer ticker.Stop()
	var (
		handledEnd, handledTerminal = -1, -1
		linger                      <-chan time.Time
		reducers                    sync.WaitGroup
	)
	defer reducers.Wait() // after cancel (deferred later, runs first)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.exiting = true
			r.mu.Unlock()
			stopPublishing()
			r.flush(context.Background())
			return
		case err := <-pubDone:
			pubDone = nil
			if err != nil && !errors.Is(err, context.Canceled) {
				r.log.Error().Err(err).Msg("publishing stopped")
				r.endMap(messages.StateFailed, "input_error: "+err.Error())
			}
		case req := <-r.stopCh:
			r.endMap(req.state, req.reason)
			stopPublishing()
			r.purgeQueued(ctx)
			r.flush(ctx)
			req.reply <- r.snapshot().Status
		case <-r.wake:
		case <-ticker.C:
			r.tick()
			r.flush(ctx)
		case <-linger:
			r.mu.Lock()
			still, held := r.terminal, r.held
			r.held = false
			r.exiting = still && !held
			r.mu.Unlock()
			if still && !held {
				r.flush(context.Background())
				return
			}
			linger = nil
			if still {
				linger = time.After(r.c.cfg.LateResultWindow)
			}
		}
		r.runPending()

		r.mu.Lock()
		ended, terminal, epoch, phase := r.mapEnded, r.terminal, r.epoch, r.rec.Status.Phase
		r.mu.Unlock()
		if ended && handledEnd != epoch {
			handledEnd = epoch
			stopPublishing()
			r.purgeQueued(ctx)
			r.afterMapEnd()
			if phase == messages.PhaseReducing {
				reducers.Go(func() { r.startReduce(ctx) })
			}
		}
		if terminal && handledTerminal != epoch {
			handledTerminal = epoch
			r.flush(ctx)
			st := r.snapshot().Status
			r.c.event(r.id, messages.EventCompleted, "JobCompleted", st)
			r.c.metrics.jobsFinished.WithLabelValues(st.State).Inc()
			linger = time.After(r.c.cfg.LateResultWindow)
		}
		if !terminal && linger != nil {
			linger = nil // reopened by a replay
		}
	}
}

// hold keeps a lingering runner for one more window because a DLQ replay
// is about to reopen the job. It fails when run is returning.
func (r *jobRunner) hold() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exiting {
		return false
	}
	r.held = true
	return true
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

// track replays the job's results from the start and follows new ones:
// every origin's (fleet.results.*.<job>), each checked by admits.
func (r *jobRunner) track(ctx context.Context) (jetstream.ConsumeContext, error) {
	subj := r.c.names.JobResultsFilter(r.id)
	var last uint64
	stream, err := r.c.js.Stream(ctx, r.c.names.ResultsStream())
	if err != nil {
		return nil, err
	}
	if m, err := stream.GetLastMsgForSubject(ctx, subj); err == nil {
		last = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("last result of %s: %w", subj, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	if last == 0 {
		once.Do(r.goLive)
	}
	return cons.Consume(func(m jetstream.Msg) {
		r.applyMsg(m)
		if last > 0 {
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				once.Do(r.goLive)
			}
		}
		r.runPending()
	})
}

// applyMsg applies one message of the results stream. A panic (a bug some
// result found) skips that result rather than end the coordinator, which
// would replay the same result and panic again after every restart.
func (r *jobRunner) applyMsg(m jetstream.Msg) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("applying a result panicked; result ignored")
		}
	}()
	var res messages.Result
	if err := json.Unmarshal(m.Data(), &res); err != nil {
		r.log.Warn().Err(err).Msg("undecodable result ignored")
		return
	}
	if r.admits(&res, r.c.names.Origin(m.Subject())) {
		r.apply(&res)
	}
}

// goLive runs once the results replay has caught up: from now on results
// are new, so policies and completion apply and events are emitted.
func (r *jobRunner) goLive() {
	r.mu.Lock()
	r.live = true
	st := &r.rec.Status
	if st.MapReason != "" {
		// The map phase ended before a coordinator restart (the job is
		// reducing) or before a DLQ replay reopened it: items without an
		// outcome then were not run, and stay so.
		for i, oc := range r.outcome {
			if oc == ocNone && !r.reopened[int64(i)] {
				r.outcome[i] = ocNotRun
				st.NotRun++
			}
		}
		r.mapEnded = st.Phase == messages.PhaseReducing
		r.dirty = true
	}
	r.checkLocked(nil)
	r.mu.Unlock()
	close(r.caughtUp)
	r.wakeUp()
}

// apply records one result, de-duplicated by item index and generation.
func (r *jobRunner) apply(res *messages.Result) {
	if res.Phase == messages.PhaseReduce {
		r.applyReduce(res)
		return
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
	}
	switch res.Reason {
	case messages.ReasonJobBudget:
		st.Budget.DeniedJob += sign
	case messages.ReasonItemBudget:
		st.Budget.DeniedItem += sign
	}
	if st.Groups != nil {
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
		e = &trackedError{sum: messages.ErrorSummary{Signature: res.Signature, Class: res.ErrorClass, Message: messages.Clip(res.Error, maxErrorMessage)}}
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
func (r *jobRunner) snapshot() messages.JobRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	st := &rec.Status
	copyStatus(st)
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
	r.c.fillBudget(ctx, &rec.Status)
	if err := r.c.store.put(ctx, &rec); err != nil {
		r.log.Warn().Err(err).Msg("job record write failed; will retry")
		r.mu.Lock()
		r.dirty = true
		r.mu.Unlock()
	}
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
	return r.mapEnded || r.terminal
}

func (r *jobRunner) isDone(idx int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome[idx] != ocNone
}

// publishAll publishes the job's items after the cursor, in input order,
// keeping at most max_parallel in flight.
func (r *jobRunner) publishAll(ctx context.Context) error {
	select {
	case <-r.caughtUp:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	spec, cursor, items := r.rec.Spec, r.rec.Cursor, r.rec.Status.Items
	routes := r.rec.Routes
	r.mu.Unlock()
	if cursor >= items {
		return nil
	}
	// Count validated the input when the job was accepted.
	src, err := expand.Open(ctx, spec, r.c.opener, expand.WithoutDuplicateCheck())
	if err != nil {
		return err
	}
	defer src.Close()
	maxPar := int64(spec.MaxParallel)
	batch := make([]expand.Item, 0, r.c.cfg.PublishBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := r.publishBatch(ctx, spec, routes, batch); err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	for {
		it, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if r.ended() {
			return nil // a policy, best effort or cancel ended the map phase
		}
		if it.Index < cursor || r.isDone(it.Index) {
			if it.Index >= cursor {
				r.advance(it.Index+1, 0)
			}
			continue
		}
		for maxPar > 0 && r.inFlight()+int64(len(batch)) >= maxPar {
			if len(batch) > 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			select {
			case <-r.progress:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if maxPar > 0 && r.ended() {
			return nil
		}
		batch = append(batch, it)
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
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
}

// publishBatch publishes items asynchronously and waits for every PubAck,
// re-publishing refused ones (a full work stream) with backoff.
func (r *jobRunner) publishBatch(ctx context.Context, spec *messages.JobSpec, routes map[string]string, batch []expand.Item) error {
	msgs := make([]*nats.Msg, len(batch))
	for i, it := range batch {
		m, err := r.workMsg(spec, routes, it)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	pending := msgs
	delay := 50 * time.Millisecond
	for len(pending) > 0 {
		futures := make([]jetstream.PubAckFuture, 0, len(pending))
		var failed []*nats.Msg
		var lastErr error
		for _, m := range pending {
			f, err := r.c.js.PublishMsgAsync(m)
			if errors.Is(err, nats.ErrMaxPayload) {
				// Acceptance keeps items within max_payload; a server whose
				// max_payload shrank since cannot take this one, ever.
				return fmt.Errorf("an item's work message is %d bytes, over the server's max_payload %d", len(m.Data), r.c.nc.MaxPayload())
			}
			if err != nil {
				lastErr = err
				failed = append(failed, m)
				continue
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				lastErr = err
				failed = append(failed, f.Msg())
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(failed) == 0 {
			break
		}
		r.log.Warn().AnErr("last_error", lastErr).Int("refused", len(failed)).Dur("delay", delay).Msg("work publishes refused; retrying")
		r.c.metrics.publishRetries.Add(float64(len(failed)))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		if delay < 2*time.Second {
			delay *= 2
		}
		pending = failed
	}
	r.c.metrics.published.Add(float64(len(batch)))
	r.advance(batch[len(batch)-1].Index+1, int64(len(batch)))
	return nil
}

func (r *jobRunner) workMsg(spec *messages.JobSpec, routes map[string]string, it expand.Item) (*nats.Msg, error) {
	wi := messages.WorkItem{
		JobID:         r.id,
		ItemID:        it.ID,
		Index:         it.Index,
		Group:         it.Group,
		Payload:       it.Raw,
		CorrelationID: fmt.Sprintf("%s:%d", r.id, it.Index),
	}
	data, err := json.Marshal(&wi)
	if err != nil {
		return nil, fmt.Errorf("item %d: %w", it.Index, err)
	}
	pool := spec.Pool
	if p, ok := routes[it.Group]; ok {
		pool = p
	}
	m := nats.NewMsg(r.c.names.WorkSubject(pool, r.id))
	m.Data = data
	// Only the dedupe id: job and item are in the body (and the job in the
	// subject), and every header costs parsing per message on the hot path.
	m.Header.Set(messages.HeaderMsgID, messages.WorkMsgID(r.id, it.ID, 0))
	return m, nil
}

// purgeQueued removes the job's queued work messages (stop or cancel).
func (r *jobRunner) purgeQueued(ctx context.Context) {
	stream, err := r.c.js.Stream(ctx, r.c.names.WorkStream())
	if err == nil {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(r.c.names.WorkSubject("*", r.id)))
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("purging queued items failed; agents will skip them")
	}
}

// stop ends the job with state and reason (cancel or policy stop).
func (r *jobRunner) stop(ctx context.Context, state, reason string) (messages.JobStatus, error) {
	req := stopRequest{state: state, reason: reason, reply: make(chan messages.JobStatus, 1)}
	r.mu.Lock()
	ended := r.mapEnded || r.terminal
	r.mu.Unlock()
	if ended {
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
