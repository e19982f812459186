package jobrun

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// How results come in (docs/design.md, "Tracking"). A leader reads the
// results stream with one ordered consumer, the hub, started at the
// stream's end when its term begins; it hands each message to the runner
// of the job in its subject. A runner that starts (a new job, a resumed,
// adopted or reopened one) first catches up: it reads its job's results
// from the start with an ordered consumer of its own (at most
// resultsCatchUps at once), rebuilding the counts (phaseReplaying), and
// then joins the hub; goLive lets the policies decide from then on. So a
// leader holds 1 + resultsCatchUps results consumers, however many jobs
// are open. apply (job.go) is the one entry point for a result, whatever
// brought it, and counts by item index and generation; the hub and the
// catch-up also skip every message at or below the stream sequence the
// runner applied last, so none is applied twice.
//
// The hub's consumer has one replica, on a server of the stream's picked
// at random, and delivers what that replica holds. A replica that stopped
// applying the stream's writes (its node's store is full, or the node is
// cut off) holds nothing new, says nothing is pending, and keeps sending
// heartbeats, so the consumer never resets itself: the jobs would wait for
// their last results for good. So while a job is open and the hub has been
// handed nothing for a while, it asks the stream's leader whether it holds
// a result past the last one delivered (watch); when it has for
// hubStallAfter, the hub makes its consumer again from there, off that
// node (docs/deploy.md, "A full store"). internal/placement moves such a
// consumer too, from the replicas' side; the hub does not rely on it.

const (
	// resultsCatchUps bounds the runners catching up at once, each with
	// its own ordered consumer. Results messages are up to max_payload each:
	// every pull asks for natsconn.PullBytes, not a count.
	resultsCatchUps = 16
)

// resultsInactive is how long the server keeps a results consumer once
// nobody pulls from it (a coordinator that died): nats.go's default, 5
// minutes, kept consumers of dead coordinators past the server's limits.
const resultsInactive = 30 * time.Second

// The hub's watch of its consumer (watch).
const (
	// hubCheckEvery: how often the hub looks whether its consumer moves
	// while a job is open. A look that finds it moved costs nothing; one
	// that finds it idle asks the stream's leader (a stream info, and a
	// message get when the stream holds more).
	hubCheckEvery = 2 * time.Second
	// hubStallAfter: how long the leader must hold a result the consumer
	// has not delivered, with nothing delivered meanwhile, before the hub
	// makes its consumer again. A healthy consumer delivers within
	// milliseconds; making it again needlessly costs one consumer.
	hubStallAfter = 4 * time.Second
	// hubPlaceTries bounds the consumers made in a row to get one off the
	// node of the consumer replaced (the server places each at random).
	hubPlaceTries = 3
)

// resultsHub hands the results stream's messages to the job runners of
// one leadership term. Safe for concurrent use.
type resultsHub struct {
	js     jetstream.JetStream
	names  messages.Names
	log    zerolog.Logger
	stream jetstream.Stream // the catch-ups'
	// follow is the stream the hub's own consumer reads: stream, or in
	// tests one whose consumers sit on a replica that applies nothing.
	follow jetstream.Stream
	clock  clock.Clock   // the watch's
	sem    chan struct{} // catch-up slots

	// cmu serializes dispatch (one consumer's messages at a time, when
	// the hub replaces its consumer) and guards what follows.
	cmu  sync.Mutex
	cons jetstream.Consumer       // nil between a failed remake and the next
	cc   jetstream.ConsumeContext // cons's consumption
	// gen is the generation of cons: dispatch drops what an older
	// consumer still hands it.
	gen uint64
	// delivered is the stream sequence of the last message cons (or the
	// one it replaced) handed to dispatch; the hub's start less one before.
	delivered uint64
	// avoid is the node of the consumer last replaced.
	avoid string

	// watchStop ends the watch; watchDone is closed when it has.
	watchStop context.CancelFunc
	watchDone chan struct{}
	// seen and aheadSince are the watch's own (its goroutine only): the
	// delivered sequence it saw last, and since when the stream's leader
	// has held a result past it (zero: not seen so).
	seen       uint64
	aheadSince time.Time

	// decoded is reused from one message to the next (dispatch only).
	decoded []messages.Result

	mu   sync.Mutex
	jobs map[string]*tracked

	// observe takes the server's timestamp of each result as it arrives
	// (the coordinator's clock, clock.Observe).
	observe func(time.Time)
}

// tracked is one runner's place in the hub.
type tracked struct {
	r *jobRunner
	// live: the runner caught up; the hub applies its job's messages. Set
	// under the hub's lock, by the catch-up.
	live bool
	// skipped is the highest stream sequence of the job's that the hub saw
	// while the runner was catching up (under the hub's lock).
	skipped uint64
	// applied is the stream sequence of the last message applied: written
	// by the catch-up until live, by the hub after.
	applied uint64
}

// hubOptions are a hub's test seams; the zero value is the real thing.
type hubOptions struct {
	// follow, when set, is the stream the hub's own consumer reads.
	follow func(jetstream.Stream) jetstream.Stream
	// clock paces the watch. Defaults to the system clock.
	clock clock.Clock
}

// startResults starts a hub at the results stream's end.
func startResults(ctx context.Context, js jetstream.JetStream, names messages.Names, log zerolog.Logger, observe func(time.Time), opts hubOptions) (*resultsHub, error) {
	// The leader's end: a replica that applies nothing may answer a
	// plain stream info with its own (kvleader.StreamInfo).
	info, err := kvleader.StreamInfo(ctx, js, names.ResultsStream())
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, names.ResultsStream())
	if err != nil {
		return nil, err
	}
	h := &resultsHub{js: js, names: names, log: log, stream: stream, follow: stream, clock: opts.clock, observe: observe,
		sem: make(chan struct{}, resultsCatchUps), jobs: map[string]*tracked{}}
	if opts.follow != nil {
		h.follow = opts.follow(stream)
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	// Every message stored from here on reaches the hub (an ordered
	// consumer that resets resumes after the last one it delivered).
	h.delivered = info.State.LastSeq
	h.seen = h.delivered
	if err := h.consume(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	h.watchStop, h.watchDone = cancel, make(chan struct{})
	go h.watch(wctx)
	return h, nil
}

// consume makes the hub's consumer, from the message after the last one
// delivered, and starts it. A consumer placed on the node of the one it
// replaces is made again, up to hubPlaceTries in all.
func (h *resultsHub) consume(ctx context.Context) error {
	h.cmu.Lock()
	from, avoid := h.delivered+1, h.avoid
	h.cmu.Unlock()
	var cons jetstream.Consumer
	for try := 1; ; try++ {
		c, err := h.follow.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{h.names.ResultsFilter()},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
			InactiveThreshold: resultsInactive,
		})
		if err != nil {
			return err
		}
		if avoid == "" || try >= hubPlaceTries || consumerNode(c) != avoid {
			cons = c
			break
		}
		h.drop(c) // where the last one sat: once more
	}
	h.cmu.Lock()
	h.gen++
	gen := h.gen
	h.cmu.Unlock()
	cc, err := cons.Consume(func(m jetstream.Msg) { h.dispatch(gen, m) },
		jetstream.PullMaxBytes(natsconn.PullBytes),
		jetstream.PullExpiry(natsconn.PullExpiry), jetstream.PullHeartbeat(natsconn.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			h.log.Debug().Err(err).Msg("results consumer")
		}))
	if err != nil {
		h.drop(cons)
		return err
	}
	h.cmu.Lock()
	h.cons, h.cc = cons, cc
	h.cmu.Unlock()
	return nil
}

// consumerNode is the server that leads cons (its one replica's), as the
// server said when it was made: "" when not known.
func consumerNode(cons jetstream.Consumer) string {
	if info := cons.CachedInfo(); info != nil && info.Cluster != nil {
		return info.Cluster.Leader
	}
	return ""
}

// stop ends the hub's watch and consumption, and deletes its consumer.
func (h *resultsHub) stop() {
	h.watchStop()
	<-h.watchDone
	h.cmu.Lock()
	cons, cc := h.cons, h.cc
	h.cons, h.cc = nil, nil
	h.gen++
	h.cmu.Unlock()
	if cc != nil {
		cc.Stop()
		h.drop(cons)
	}
}

// watch looks every hubCheckEvery whether the hub's consumer still
// delivers (check), until ctx ends.
func (h *resultsHub) watch(ctx context.Context) {
	defer close(h.watchDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.clock.After(hubCheckEvery):
		}
		h.check(ctx)
	}
}

// check makes the hub's consumer again when it has delivered nothing
// while the stream's leader has held a result past its last one for
// hubStallAfter, and a job waits for results; or when it has none (a
// failed remake). Nothing is asked of the server while the consumer
// delivers, or while no job is open.
func (h *resultsHub) check(ctx context.Context) {
	h.cmu.Lock()
	delivered, none := h.delivered, h.cc == nil
	h.cmu.Unlock()
	h.mu.Lock()
	open := len(h.jobs)
	h.mu.Unlock()
	if none {
		if err := h.remake(ctx); err != nil {
			h.log.Warn().Err(err).Msg("cannot make the results consumer again; trying again")
		}
		return
	}
	if open == 0 || delivered != h.seen {
		h.seen, h.aheadSince = delivered, time.Time{}
		return
	}
	now := h.clock.Now()
	actx, cancel := context.WithTimeout(ctx, hubCheckEvery)
	ahead, last, err := h.leaderAhead(actx, delivered)
	cancel()
	switch {
	case err != nil:
		h.log.Debug().Err(err).Msg("asking the results stream's leader for its last result")
		return
	case !ahead:
		h.aheadSince = time.Time{}
		return
	case h.aheadSince.IsZero():
		h.aheadSince = now
		return
	case now.Sub(h.aheadSince) < hubStallAfter:
		return
	}
	h.cmu.Lock()
	node := ""
	if h.cons != nil {
		node = consumerNode(h.cons)
	}
	h.cmu.Unlock()
	h.log.Warn().Uint64("delivered", delivered).Uint64("leader_last", last).Str("node", node).
		Dur("for", now.Sub(h.aheadSince)).
		Msg("the results consumer's replica holds nothing new while the stream's leader does (a full store, or a node cut off): made again elsewhere")
	h.aheadSince = time.Time{}
	if err := h.remake(ctx); err != nil {
		h.log.Warn().Err(err).Msg("cannot make the results consumer again; trying again")
	}
}

// leaderAhead reports whether the results stream's leader holds a result
// after stream sequence delivered, and its last sequence.
func (h *resultsHub) leaderAhead(ctx context.Context, delivered uint64) (bool, uint64, error) {
	name := h.names.ResultsStream()
	info, err := kvleader.StreamInfo(ctx, h.js, name)
	if err != nil {
		return false, 0, err
	}
	last := info.State.LastSeq
	if last <= delivered {
		return false, last, nil
	}
	more, err := kvleader.StoredAfter(ctx, h.js, name, h.names.ResultsFilter(), delivered, last)
	return more, last, err
}

// remake replaces the hub's consumer with one made from the message after
// the last one delivered, away from the node of the one replaced. On an
// error the hub has no consumer until the watch's next check makes one.
func (h *resultsHub) remake(ctx context.Context) error {
	h.cmu.Lock()
	cons, cc := h.cons, h.cc
	h.cons, h.cc = nil, nil
	h.gen++ // what cons still hands over is dropped
	if cons != nil {
		h.avoid = consumerNode(cons)
	}
	h.cmu.Unlock()
	if cc != nil {
		cc.Stop()
		h.drop(cons)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return h.consume(actx)
}

// drop deletes an ordered consumer that is no longer read, rather than
// leave it to its inactive threshold.
func (h *resultsHub) drop(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.stream.DeleteConsumer(ctx, info.Name)
}

// dispatch applies one message of the stream, from the hub's consumer of
// generation gen, to its job's runner.
func (h *resultsHub) dispatch(gen uint64, m jetstream.Msg) {
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if gen != h.gen {
		return // a consumer the hub replaced
	}
	md, err := m.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	h.delivered = max(h.delivered, seq)
	if h.observe != nil {
		h.observe(md.Timestamp)
	}
	_, job, ok := wire.ParseResult(h.names, m.Subject())
	if !ok {
		return
	}
	h.mu.Lock()
	t := h.jobs[job]
	if t == nil {
		h.mu.Unlock()
		return // no runner: a finished job's result after its linger
	}
	if !t.live {
		t.skipped = max(t.skipped, seq)
		h.mu.Unlock()
		return // the catch-up reads it
	}
	h.mu.Unlock()
	if seq <= t.applied {
		return
	}
	t.r.applyMsg(m.Subject(), m.Data(), &h.decoded)
	t.applied = seq
	t.r.runPending()
	t.r.wakeUp() // the run loop writes the record
}

// track makes the runner follow its job's results: it catches up in the
// background, then goes live (goLive) and receives the hub's. The
// returned func stops following; call it before the runner exits.
func (r *jobRunner) track(ctx context.Context, h *resultsHub) (stop func()) {
	t := &tracked{r: r}
	h.mu.Lock()
	h.jobs[r.id] = t
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := h.catchUp(ctx, t); err != nil {
			return // ctx ended
		}
		r.goLive()
	}()
	return func() {
		cancel()
		<-done
		h.mu.Lock()
		if h.jobs[r.id] == t {
			delete(h.jobs, r.id)
		}
		h.mu.Unlock()
	}
}

// catchUp applies the job's stored results until it reaches what the hub
// has seen of them, then marks t live. It returns only ctx's error.
func (h *resultsHub) catchUp(ctx context.Context, t *tracked) error {
	subj := h.names.JobResultsFilter(t.r.id)
	target, err := h.lastSeq(ctx, subj, t.r.log)
	if err != nil {
		return err
	}
	var (
		it      jetstream.MessagesContext
		cons    jetstream.Consumer
		decoded []messages.Result
		slot    bool
	)
	closeIt := func() {
		if it != nil {
			it.Stop()
			h.drop(cons)
			it, cons = nil, nil
		}
	}
	defer func() {
		closeIt()
		if slot {
			<-h.sem
		}
	}()
	for fails := 0; ; {
		if t.applied >= target {
			h.mu.Lock()
			if t.skipped <= t.applied {
				t.live = true
				h.mu.Unlock()
				return nil
			}
			target = t.skipped // the hub saw some meanwhile: read them too
			h.mu.Unlock()
		}
		if !slot {
			select {
			case h.sem <- struct{}{}:
				slot = true
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if it == nil {
			if cons, it, err = h.replay(ctx, subj, t.applied+1); err != nil {
				if err := h.wait(ctx, &fails, t.r.log, err); err != nil {
					return err
				}
				continue
			}
			stopIt := it
			defer context.AfterFunc(ctx, stopIt.Stop)()
		}
		m, err := it.Next()
		if err != nil {
			closeIt()
			if err := h.wait(ctx, &fails, t.r.log, err); err != nil {
				return err
			}
			continue
		}
		fails = 0
		md, err := m.Metadata()
		if err != nil || md.Sequence.Stream <= t.applied {
			continue
		}
		t.r.applyMsg(m.Subject(), m.Data(), &decoded)
		t.applied = md.Sequence.Stream
		t.r.runPending()
		t.r.wakeUp()
		// The consumer's replica may lag the stream's leader and say
		// nothing is pending short of target (kvleader.ReadOn): ending
		// there would lose the results between its end and where the hub
		// started, and the job would wait for them for good. The catch-up
		// reads on to what the leader still holds, as the replica catches
		// up (TestResultsCatchUpReadsPastALaggingReplica).
		more, err := h.readOn(ctx, subj, md, target, t.r.log)
		if err != nil {
			return err
		}
		if !more {
			target = min(target, t.applied) // reached, or the rest up to it was purged
		}
	}
}

// readOn is kvleader.ReadOn on the results stream, tried again after NATS
// errors until ctx ends.
func (h *resultsHub) readOn(ctx context.Context, subj string, md *jetstream.MsgMetadata, target uint64, log zerolog.Logger) (bool, error) {
	for fails := 0; ; {
		more, err := kvleader.ReadOn(ctx, h.js, h.names.ResultsStream(), subj, md, target)
		if err == nil {
			return more, nil
		}
		if err := h.wait(ctx, &fails, log, fmt.Errorf("results of %s after %d: %w", subj, md.Sequence.Stream, err)); err != nil {
			return false, err
		}
	}
}

// lastSeq is the stream sequence of subj's last message (0: none yet), as
// the stream's leader holds it (kvleader.LastStored: a full node's replica
// may answer first).
func (h *resultsHub) lastSeq(ctx context.Context, subj string, log zerolog.Logger) (uint64, error) {
	for fails := 0; ; {
		seq, err := kvleader.LastStored(ctx, h.js, h.names.ResultsStream(), subj)
		if err == nil {
			return seq, nil
		}
		if err := h.wait(ctx, &fails, log, fmt.Errorf("last result of %s: %w", subj, err)); err != nil {
			return 0, err
		}
	}
}

// replay reads subj from stream sequence from on.
func (h *resultsHub) replay(ctx context.Context, subj string, from uint64) (jetstream.Consumer, jetstream.MessagesContext, error) {
	cons, err := h.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		InactiveThreshold: resultsInactive,
	})
	if err != nil {
		return nil, nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(natsconn.PullBytes),
		jetstream.PullExpiry(natsconn.PullExpiry), jetstream.PullHeartbeat(natsconn.PullHeartbeat))
	return cons, it, err
}

// catchUpBackoff spaces a catch-up's attempts after NATS errors.
var catchUpBackoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}

// wait logs err and waits before the next attempt; it returns ctx's error
// if ctx ends first.
func (h *resultsHub) wait(ctx context.Context, fails *int, log zerolog.Logger, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d := catchUpBackoff[min(*fails, len(catchUpBackoff)-1)]
	*fails++
	log.Warn().Err(err).Dur("delay", d).Msg("reading the job's results failed; trying again")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// applyMsg applies one message of the results stream: one result, or an
// agent's batch of them (wire.DecodeResults), decoded into *buf. A
// panic (a bug some result found) skips the rest of that message rather
// than end the coordinator, which would replay the same result and panic
// again after every restart.
func (r *jobRunner) applyMsg(subject string, data []byte, buf *[]messages.Result) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("applying a result panicked; result ignored")
		}
	}()
	var err error
	*buf, err = wire.DecodeResults(data, *buf)
	if err != nil {
		if err := wire.PeekSchema(data).Check("a results message"); err != nil {
			r.leaveNewer(err)
			return
		}
		r.log.Warn().Err(err).Msg("undecodable results message ignored")
		return
	}
	origin := wire.Origin(r.c.names, subject)
	for i := range *buf {
		res := &(*buf)[i]
		if err := res.V.Check("the result of item " + res.ItemID); err != nil {
			r.leaveNewer(err)
			continue
		}
		if r.admits(res, origin) {
			r.apply(res)
		}
	}
}

// goLive runs once the results replay has caught up: from now on results
// are new, so policies and completion apply and events are emitted. The
// runner leaves phaseReplaying for mapping, or for reducing when the map
// phase had ended before a coordinator restart.
func (r *jobRunner) goLive() {
	r.mu.Lock()
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
		r.dirty = true
	}
	r.life.catchUp(st.MapReason != "" && st.Phase == messages.PhaseReducing)
	r.syncPhaseLocked()
	r.checkLocked(nil)
	r.mu.Unlock()
	close(r.caughtUp)
	r.wakeUp()
}
