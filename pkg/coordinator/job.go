package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/expand"
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
)

var outcomeCodes = map[string]uint8{
	messages.OutcomeSucceeded:    ocSucceeded,
	messages.OutcomeFailed:       ocFailed,
	messages.OutcomeDeadLettered: ocDeadLettered,
	messages.OutcomeSkipped:      ocSkipped,
	messages.OutcomeNotRun:       ocNotRun,
}

// maxErrorItems bounds the item ids kept per error signature in the report.
const maxErrorItems = 10

// jobRunner drives one unfinished job: it publishes the job's items and
// follows their results until every item has a terminal outcome.
type jobRunner struct {
	c   *Coordinator
	id  string
	log zerolog.Logger

	mu       sync.Mutex
	rec      messages.JobRecord
	outcome  []uint8       // per item index
	gens     map[int64]int // generation of replayed items (absent = 0)
	errs     map[string]*messages.ErrorSummary
	dirty    bool
	finished bool

	progress chan struct{} // a result arrived (cap 1, non-blocking send)
	caughtUp chan struct{} // results replay reached the end seen at start
	done     chan struct{} // closed once the job is terminal and written
	stopCh   chan stopRequest
	cancel   context.CancelFunc
}

type stopRequest struct {
	state, reason string
	reply         chan messages.JobStatus
}

func newJobRunner(c *Coordinator, rec messages.JobRecord) *jobRunner {
	r := &jobRunner{
		c:        c,
		id:       rec.Status.ID,
		log:      c.log.With().Str("job_id", rec.Status.ID).Logger(),
		rec:      rec,
		outcome:  make([]uint8, rec.Status.Items),
		gens:     map[int64]int{},
		errs:     map[string]*messages.ErrorSummary{},
		progress: make(chan struct{}, 1),
		caughtUp: make(chan struct{}),
		done:     make(chan struct{}),
		stopCh:   make(chan stopRequest),
	}
	// Counts are rebuilt from the results stream; the stored ones are only a
	// snapshot for readers.
	st := &r.rec.Status
	st.Succeeded, st.Failed, st.DeadLettered, st.Skipped, st.NotRun, st.Retries = 0, 0, 0, 0, 0, 0
	st.Budget.DeniedJob, st.Budget.DeniedItem = 0, 0
	st.Published = rec.Cursor
	st.Errors = nil
	for g, gs := range st.Groups {
		st.Groups[g] = messages.GroupStatus{Items: gs.Items}
	}
	return r
}

// run publishes and tracks until the job ends or ctx is cancelled (a
// coordinator shutdown, which leaves the job to be resumed).
func (r *jobRunner) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	defer cancel()

	cc, err := r.track(ctx)
	if err != nil {
		r.log.Error().Err(err).Msg("cannot follow results; job left for the next coordinator start")
		return
	}
	defer cc.Stop()

	if r.rec.Status.State == messages.StatePending {
		now := r.c.cfg.Clock.Now()
		r.mu.Lock()
		r.rec.Status.State = messages.StateRunning
		r.rec.Status.StartedAt = &now
		r.dirty = true
		r.mu.Unlock()
		r.c.event(r.id, messages.EventStarted, "JobStarted", map[string]any{"items": r.rec.Status.Items})
	}
	r.checkComplete() // a job of zero items, or one finished before a restart

	pubDone := make(chan error, 1)
	pubCtx, pubCancel := context.WithCancel(ctx)
	defer pubCancel()
	go func() { pubDone <- r.publishAll(pubCtx) }()

	ticker := time.NewTicker(r.c.cfg.StatusInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			pubCancel()
			if pubDone != nil {
				<-pubDone
			}
			r.flush(context.Background())
			return
		case err := <-pubDone:
			pubDone = nil
			if err != nil && !errors.Is(err, context.Canceled) {
				r.log.Error().Err(err).Msg("publishing stopped")
				r.finish(messages.StateFailed, "input_error: "+err.Error())
			}
		case req := <-r.stopCh:
			pubCancel()
			if pubDone != nil {
				<-pubDone
				pubDone = nil
			}
			r.purgeQueued(ctx)
			r.finish(req.state, req.reason)
			req.reply <- r.snapshot().Status
		case <-ticker.C:
			r.flush(ctx)
		case <-r.done:
			pubCancel()
			if pubDone != nil {
				<-pubDone
			}
			r.flush(context.Background())
			r.c.event(r.id, messages.EventCompleted, "JobCompleted", r.snapshot().Status)
			return
		}
	}
}

// track replays the job's results from the start and follows new ones.
func (r *jobRunner) track(ctx context.Context) (jetstream.ConsumeContext, error) {
	subj := r.c.names.ResultSubject(r.id)
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
	if last == 0 {
		close(r.caughtUp)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return cons.Consume(func(m jetstream.Msg) {
		var res messages.Result
		if err := json.Unmarshal(m.Data(), &res); err != nil {
			r.log.Warn().Err(err).Msg("undecodable result ignored")
		} else {
			r.apply(&res)
		}
		if last > 0 {
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				once.Do(func() { close(r.caughtUp) })
			}
		}
	})
}

// apply records one result, de-duplicated by item index and generation.
func (r *jobRunner) apply(res *messages.Result) {
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
	prev := r.outcome[res.Index]
	if prev != ocNone {
		newer := res.Generation > r.gens[res.Index]
		lateNotRun := prev == ocNotRun && res.Generation == r.gens[res.Index]
		if !newer && !lateNotRun {
			return // a duplicate run's result
		}
		r.count(prev, res, -1)
	}
	r.outcome[res.Index] = code
	if res.Generation > 0 {
		r.gens[res.Index] = res.Generation
	}
	r.count(code, res, +1)
	if r.finished && prev == ocNone {
		st.LateResults++
	}
	r.dirty = true
	select {
	case r.progress <- struct{}{}:
	default:
	}
	r.checkCompleteLocked()
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
	case ocNotRun:
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
		g.Done += sign
		if code == ocSucceeded {
			g.Succeeded += sign
		}
		st.Groups[res.Group] = g
	}
	if sign > 0 && (code == ocFailed || code == ocDeadLettered) && res.Signature != "" {
		e := r.errs[res.Signature]
		if e == nil {
			e = &messages.ErrorSummary{Signature: res.Signature, Class: res.ErrorClass, Message: res.Error}
			r.errs[res.Signature] = e
		}
		e.Count++
		if len(e.Items) < maxErrorItems {
			e.Items = append(e.Items, res.ItemID)
		}
	}
}

func (r *jobRunner) checkComplete() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkCompleteLocked()
}

func (r *jobRunner) checkCompleteLocked() {
	st := &r.rec.Status
	if r.finished || st.Done() < st.Items {
		return
	}
	state := messages.StateSucceeded
	if st.Failed+st.DeadLettered > 0 {
		state = messages.StateFailed
	}
	r.finishLocked(state, messages.CompletionAllCompleted)
}

func (r *jobRunner) finish(state, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(state, reason)
}

// finishLocked makes the job terminal: unfinished items become not_run.
func (r *jobRunner) finishLocked(state, reason string) {
	if r.finished {
		return
	}
	r.finished = true
	st := &r.rec.Status
	for i, oc := range r.outcome {
		if oc == ocNone {
			r.outcome[i] = ocNotRun
			st.NotRun++
		}
	}
	st.State = state
	st.CompletionReason = reason
	now := r.c.cfg.Clock.Now()
	st.FinishedAt = &now
	r.dirty = true
	close(r.done)
}

// snapshot copies the record with the error report filled in.
func (r *jobRunner) snapshot() messages.JobRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	st := &rec.Status
	if len(r.rec.Status.Groups) > 0 {
		st.Groups = make(map[string]messages.GroupStatus, len(r.rec.Status.Groups))
		for g, v := range r.rec.Status.Groups {
			st.Groups[g] = v
		}
	}
	st.Errors = make([]messages.ErrorSummary, 0, len(r.errs))
	for _, e := range r.errs {
		cp := *e
		cp.Items = append([]string(nil), e.Items...)
		st.Errors = append(st.Errors, cp)
	}
	sortErrors(st.Errors)
	return rec
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
		for _, m := range pending {
			f, err := r.c.js.PublishMsgAsync(m)
			if err != nil {
				failed = append(failed, m)
				continue
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				r.log.Debug().Err(err).Msg("work publish refused; retrying")
				failed = append(failed, f.Msg())
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(failed) == 0 {
			break
		}
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
	select {
	case r.stopCh <- req:
	case <-r.done:
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
