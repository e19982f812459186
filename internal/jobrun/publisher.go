package jobrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// batchSender publishes a batch of work messages and waits for their
// PubAcks (jspub.Publisher.Send): it returns the messages the stream did
// not store, with the last reason, and an error only for ctx's end or a
// message over max_payload.
type batchSender interface {
	Send(ctx context.Context, msgs []*nats.Msg) (refused []*nats.Msg, lastRefusal error, err error)
}

// publishState is what the publisher reads and moves in its job's
// runner; every method takes the runner's lock.
type publishState interface {
	// ended reports whether the map phase is over (publishing stops).
	ended() bool
	// isDone reports whether item idx already has an outcome.
	isDone(idx int64) bool
	// inFlight is the number of published items without an outcome.
	inFlight() int64
	// advance moves the cursor to cursor (if further) and counts
	// published more items as published.
	advance(cursor, published int64)
}

// window is max_parallel: at most limit items published and without an
// outcome, across the fleet (0: no bound).
type window struct{ limit int64 }

func (w window) bounded() bool { return w.limit > 0 }

// full reports whether inFlight published items and batched ones about to
// be fill the window.
func (w window) full(inFlight, batched int64) bool {
	return w.bounded() && inFlight+batched >= w.limit
}

// queue is the job's fair share of its pool: at most limit of its messages
// in the work stream, queued or being run (0: no bound). Unlike the window
// it does not count parked retries, which wait in the park stream: a job
// whose items park keeps publishing, and a job submitted later starts
// behind at most limit items of each running job.
//
// The publisher keeps an estimate: the count the server last gave plus
// what was published since less the outcomes since.
// A parked item leaves the stream without an outcome, so the estimate
// asks the server again (count) at most every queueRecheck while full.
type queue struct {
	limit int64
	// share, when set, is the job's share of limit now (its priority
	// against the others', priority.go).
	share func(limit int64) int64
	// count asks the server for the job's messages in the work stream.
	count func(ctx context.Context) (int64, error)
	// known is count's last answer, taken when the job had inFlightAt
	// items published without an outcome.
	known, inFlightAt int64
}

// queueRecheck is how often a full queue asks the server for its count.
const queueRecheck = 100 * time.Millisecond

func (q *queue) bounded() bool { return q.limit > 0 }

// full reports whether inFlight published items (of which the estimate
// moves since the last count) and batched ones about to be fill the queue.
func (q *queue) full(inFlight, batched int64) bool {
	if !q.bounded() {
		return false
	}
	limit := q.limit
	if q.share != nil {
		limit = q.share(limit)
	}
	return q.known+inFlight-q.inFlightAt+batched >= limit
}

// recount asks the server for the job's messages in the work stream.
// inFlight is read after the answer, so that no outcome is taken off both
// the count and the estimate. The bound is on items without an outcome:
// an item whose result is in leaves the stream when the agent's ack
// arrives, which is sent once the agent's results batch is stored, so the
// stream may hold up to a results batch (256) per agent more (measured:
// 217 with two agents).
func (q *queue) recount(ctx context.Context, inFlight func() int64) error {
	n, err := q.count(ctx)
	if err != nil {
		return err
	}
	q.known, q.inFlightAt = n, inFlight()
	return nil
}

// publishBackoff spaces the publishing again of work messages the stream
// refused (it is full): 50ms doubling to 3.2s.
var publishBackoff = retry.Exponential(50*time.Millisecond, 3200*time.Millisecond)

// publisher publishes a job's items to the work stream: in input order
// from the cursor on, PublishBatch at a time with every PubAck awaited,
// keeping the window, and publishing again what a full stream refused.
// Items with an outcome (a restart) are skipped. It runs on one goroutine;
// it is not safe for concurrent use.
type publisher struct {
	job    string
	spec   *messages.JobSpec
	routes map[string]string // group → pool (JobRecord.Routes)
	cursor int64             // the first index not yet published
	items  int64
	batch  int
	window window
	queue  queue
	open   expand.Opener
	names  messages.Names
	send   batchSender
	// maxPayload is the server's max_payload, for the error about an item
	// it cannot take.
	maxPayload func() int64
	state      publishState
	progress   <-chan struct{} // a result arrived: the window may have room
	after      func(time.Duration) <-chan time.Time
	log        zerolog.Logger
	metrics    *metrics
	// tr records publish spans in the job's trace (JobRecord.Trace); tp
	// is the current batch's traceparent, which its items carry.
	tr        tracing.Tracer
	trace, tp string
	sign      signFunc // nil: items are not signed
	// pools and priority place the job among the others publishing to
	// its pools (priority.go).
	pools    []string
	priority int
	// subjects holds the work subject of each pool the job publishes to,
	// made once rather than per item.
	subjects map[string]string
}

// newPublisher builds the runner's publisher from its record as it is now.
func (r *jobRunner) newPublisher() *publisher {
	r.mu.Lock()
	defer r.mu.Unlock()
	pools, prio := jobPools(&r.rec), wire.EffectivePriority(r.rec.Spec)
	return &publisher{
		job: r.id, spec: r.rec.Spec, routes: r.rec.Routes,
		cursor: r.rec.Cursor, items: r.rec.Status.Items,
		batch: r.c.cfg.PublishBatch, window: window{int64(r.rec.Spec.MaxParallel)},
		queue: queue{limit: max(r.c.cfg.JobQueue, 0), count: r.c.queued(r.id), share: func(limit int64) int64 {
			return share(limit, prio, r.c.priorities.top(pools))
		}},
		open: r.c.opener, names: r.c.names, send: r.c.work, maxPayload: r.c.nc.MaxPayload,
		state: r, progress: r.progress, after: time.After, log: r.log, metrics: r.c.metrics,
		tr: r.c.tr, trace: r.rec.Trace,
		sign:  r.c.signer(),
		pools: pools, priority: prio,
	}
}

// run publishes until every item is published, the map phase ends, or
// ctx ends (ctx's error). Any other error ends the job (input_error).
func (p *publisher) run(ctx context.Context) error {
	if p.cursor >= p.items {
		return nil
	}
	// Count validated the input when the job was accepted.
	src, err := expand.Open(ctx, p.spec, p.open, expand.WithoutDuplicateCheck())
	if err != nil {
		return err
	}
	defer src.Close()
	batch := make([]expand.Item, 0, p.batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := p.publishBatch(ctx, batch); err != nil {
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
		if p.state.ended() {
			return nil // a policy, best effort or cancel ended the map phase
		}
		if it.Index < p.cursor || p.state.isDone(it.Index) {
			if it.Index >= p.cursor {
				p.state.advance(it.Index+1, 0)
			}
			continue
		}
		// bounded first: inFlight takes the runner's lock, which the
		// results consumer needs too.
		for p.window.bounded() && p.window.full(p.state.inFlight(), int64(len(batch))) {
			if len(batch) > 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			select {
			case <-p.progress:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := p.waitQueue(ctx, &batch, flush); err != nil {
			return err
		}
		if (p.window.bounded() || p.queue.bounded()) && p.state.ended() {
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

// waitQueue waits while the job's fair share of the work stream is full:
// the batch is flushed first, then the publisher waits for an outcome
// (the estimate falls) or, every queueRecheck, asks the server (parked
// items have left the stream).
func (p *publisher) waitQueue(ctx context.Context, batch *[]expand.Item, flush func() error) error {
	var tick <-chan time.Time
	for p.queue.bounded() && p.queue.full(p.state.inFlight(), int64(len(*batch))) {
		if len(*batch) > 0 {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		if tick == nil {
			tick = p.after(queueRecheck)
		}
		select {
		case <-p.progress:
		case <-tick:
			tick = nil
			if err := p.queue.recount(ctx, p.state.inFlight); err != nil && ctx.Err() == nil {
				p.log.Warn().Err(err).Msg("cannot count the job's queued work messages; waiting")
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// publishBatch publishes items asynchronously and waits for every PubAck,
// re-publishing refused ones (a full work stream) with backoff; then it
// moves the cursor past the batch.
func (p *publisher) publishBatch(ctx context.Context, batch []expand.Item) error {
	var span trace.Span
	p.tp, span = p.tracePublish(ctx, batch[0].Index, len(batch))
	defer span.End()
	msgs := make([]*nats.Msg, len(batch))
	for i, it := range batch {
		m, err := p.workMsg(it)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	pending := msgs
	clk := clock.AfterFunc(p.after)
	backoff := retry.NewBackoff(publishBackoff, nil, clk)
	for {
		refused, lastErr, err := p.send.Send(ctx, pending)
		if errors.Is(err, nats.ErrMaxPayload) {
			// Acceptance keeps items within max_payload; a server whose
			// max_payload shrank since cannot take these, ever.
			big := slices.MaxFunc(pending, func(a, b *nats.Msg) int { return cmp.Compare(len(a.Data), len(b.Data)) })
			return fmt.Errorf("an item's work message is %d bytes, over the server's max_payload %d", len(big.Data), p.maxPayload())
		}
		if err != nil {
			return err
		}
		if len(refused) == 0 {
			break
		}
		delay := backoff.Next()
		p.log.Warn().AnErr("last_error", lastErr).Int("refused", len(refused)).Dur("delay", delay).Msg("work publishes refused; retrying")
		p.metrics.publishRetries.Add(float64(len(refused)))
		if err := retry.Sleep(ctx, clk, delay); err != nil {
			return err
		}
		pending = refused
	}
	p.metrics.published.Add(float64(len(batch)))
	p.state.advance(batch[len(batch)-1].Index+1, int64(len(batch)))
	return nil
}

// workMsg is item it's work message, on the subject of the pool its group
// is routed to.
func (p *publisher) workMsg(it expand.Item) (*nats.Msg, error) {
	pool := p.spec.Pool
	if pl, ok := p.routes[it.Group]; ok {
		pool = pl
	}
	data, err := encodeWork(p.job, pool, it, p.sign)
	if err != nil {
		return nil, fmt.Errorf("item %d: %w", it.Index, err)
	}
	// Only the dedupe id: job and item are in the body (and the job in the
	// subject), and every header costs parsing per message on the hot path.
	// The key is canonical already: no Header.Set, which would allocate to
	// canonicalize it again.
	subject, ok := p.subjects[pool]
	if !ok {
		if p.subjects == nil {
			p.subjects = map[string]string{}
		}
		subject = p.names.WorkSubject(pool, p.job)
		p.subjects[pool] = subject
	}
	m := &nats.Msg{
		Subject: subject,
		Data:    data,
		Header:  nats.Header{messages.HeaderMsgID: []string{wire.WorkMsgID(p.job, it.ID, 0)}},
	}
	if p.tp != "" {
		m.Header[tracing.HeaderTraceparent] = []string{p.tp}
	}
	return m, nil
}

// encodeWork is item it's first work message. Its size was checked when
// the job was accepted: no bound here.
// sign, when not nil, signs it for pool.
func encodeWork(job, pool string, it expand.Item, sign signFunc) ([]byte, error) {
	wi := &wire.WorkItem{
		JobID: job, ItemID: it.ID, Index: it.Index, Group: it.Group, Payload: it.Raw,
		CorrelationID: job + ":" + strconv.FormatInt(it.Index, 10),
	}
	if sign != nil {
		if err := sign(pool, wi); err != nil {
			return nil, err
		}
	}
	return wire.EncodeWorkItem(wi, math.MaxInt)
}

// signFunc sets wi.Sig for pool.
type signFunc func(pool string, wi *wire.WorkItem) error

// publishing is a publisher running in the background for the run loop.
type publishing struct {
	cancel context.CancelFunc
	// result delivers run's error once; the run loop sets it to nil when
	// it has taken it.
	result chan error
}

// start runs p.run on its own goroutine once the results replay caught up
// (a restarted job skips the items that have an outcome).
func (r *jobRunner) startPublishing(ctx context.Context) *publishing {
	ctx, cancel := context.WithCancel(ctx)
	pg := &publishing{cancel: cancel, result: make(chan error, 1)}
	go func() {
		select {
		case <-r.caughtUp:
		case <-ctx.Done():
			pg.result <- ctx.Err()
			return
		}
		select { // what is paused (pause.go)
		case <-r.c.pauses.Ready():
		case <-ctx.Done():
			pg.result <- ctx.Err()
			return
		}
		if r.pausedBy() != "" {
			r.wakeUp() // the run loop marks the job paused
			pg.result <- nil
			return
		}
		if err := r.holdNotBefore(ctx); err != nil { // not_before (notbefore.go)
			pg.result <- err
			return
		}
		p := r.newPublisher()
		if p.queue.bounded() && p.cursor < p.items {
			// Counted while it publishes: the shares of lower-priority
			// jobs in its pools shrink meanwhile (priority.go).
			defer r.c.priorities.add(p.pools, p.priority)()
		}
		pg.result <- p.run(ctx)
	}()
	return pg
}

// stop cancels the publisher and waits for it to return. Idempotent.
func (pg *publishing) stop() {
	pg.cancel()
	if pg.result != nil {
		<-pg.result
		pg.result = nil
	}
}

// queued returns how job's messages in the work stream are counted: the
// stream's per-subject counts of the job's work subjects, every pool's.
// A WorkQueue stream holds a message until it is acked, so this is what
// is queued and what agents are running, not what is parked.
func (c *Coordinator) queued(job string) func(ctx context.Context) (int64, error) {
	filter := c.names.WorkSubject("*", job)
	return func(ctx context.Context) (int64, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := c.stream(ctx, c.names.WorkStream())
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return 0, err
		}
		var n uint64
		for _, m := range info.State.Subjects {
			n += m
		}
		return int64(n), nil
	}
}
