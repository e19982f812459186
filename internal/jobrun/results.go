package jobrun

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

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

// resultsHub hands the results stream's messages to the job runners of
// one leadership term. Safe for concurrent use.
type resultsHub struct {
	js     jetstream.JetStream
	names  messages.Names
	log    zerolog.Logger
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
	sem    chan struct{} // catch-up slots

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

// startResults starts a hub at the results stream's end.
func startResults(ctx context.Context, js jetstream.JetStream, names messages.Names, log zerolog.Logger, observe func(time.Time)) (*resultsHub, error) {
	stream, err := js.Stream(ctx, names.ResultsStream())
	if err != nil {
		return nil, err
	}
	h := &resultsHub{js: js, names: names, log: log, stream: stream, observe: observe,
		sem: make(chan struct{}, resultsCatchUps), jobs: map[string]*tracked{}}
	// Every message stored from here on reaches the hub (an ordered
	// consumer that resets resumes after the last one it delivered).
	next := stream.CachedInfo().State.LastSeq + 1
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.ResultsFilter()},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: next,
		InactiveThreshold: resultsInactive,
	})
	if err != nil {
		return nil, err
	}
	h.cons = cons
	h.cc, err = cons.Consume(h.dispatch, jetstream.PullMaxBytes(natsconn.PullBytes),
		jetstream.PullExpiry(natsconn.PullExpiry), jetstream.PullHeartbeat(natsconn.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.Debug().Err(err).Msg("results consumer")
		}))
	if err != nil {
		return nil, err
	}
	return h, nil
}

// stop ends the hub's consumption and deletes its consumer.
func (h *resultsHub) stop() {
	h.cc.Stop()
	h.drop(h.cons)
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

// dispatch applies one message of the stream to its job's runner.
func (h *resultsHub) dispatch(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
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

// lastSeq is the stream sequence of subj's last message (0: none yet).
func (h *resultsHub) lastSeq(ctx context.Context, subj string, log zerolog.Logger) (uint64, error) {
	for fails := 0; ; {
		m, err := h.stream.GetLastMsgForSubject(ctx, subj)
		switch {
		case err == nil:
			return m.Sequence, nil
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, nil
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
