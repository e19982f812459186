package coordinator

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// How results come in. A runner reads its job's results subject from the
// start with an ordered consumer: the replay of what is stored rebuilds
// the counts (phaseReplaying), then goLive lets the policies decide, and
// new results are applied as they arrive. apply (job.go) is the one entry
// point for a result, whatever brought it.

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
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj},
		InactiveThreshold: resultsInactive})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	if last == 0 {
		once.Do(r.goLive)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		r.applyMsg(m)
		if last > 0 {
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				once.Do(r.goLive)
			}
		}
		r.runPending()
	})
	if err != nil {
		return nil, err
	}
	return &resultsFeed{ConsumeContext: cc, js: r.c.js, stream: r.c.names.ResultsStream(), cons: cons}, nil
}

// resultsInactive is how long the server keeps a runner's results
// consumer once nobody pulls from it (a coordinator that died): nats.go's
// default, 5 minutes, kept the consumers of thousands of short jobs at
// once, past the server's consumer limits.
const resultsInactive = 30 * time.Second

// resultsFeed is a runner's results consumption; Stop also deletes the
// consumer (an ordered consumer's Stop leaves it to its inactive
// threshold).
type resultsFeed struct {
	jetstream.ConsumeContext
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
}

func (f *resultsFeed) Stop() {
	f.ConsumeContext.Stop()
	info := f.cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.js.DeleteConsumer(ctx, f.stream, info.Name) // else the inactive threshold removes it
}

// applyMsg applies one message of the results stream: one result, or an
// agent's batch of them (messages.DecodeResults). A panic (a bug some
// result found) skips the rest of that message rather than end the
// coordinator, which would replay the same result and panic again after
// every restart. It is called by the results consumer only (decoded is
// reused from one message to the next).
func (r *jobRunner) applyMsg(m jetstream.Msg) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("applying a result panicked; result ignored")
		}
	}()
	var err error
	r.decoded, err = messages.DecodeResults(m.Data(), r.decoded)
	if err != nil {
		r.log.Warn().Err(err).Msg("undecodable results message ignored")
		return
	}
	origin := r.c.names.Origin(m.Subject())
	for i := range r.decoded {
		if res := &r.decoded[i]; r.admits(res, origin) {
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
