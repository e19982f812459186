package jobrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// startReduce publishes the job's reduce item once the map phase ended:
// it writes the map results (each item's latest outcome and output) to the
// inputs object store for ${map.results}, then publishes one work item
// with phase reduce to the job's pool. It retries until it succeeds or ctx
// ends; both steps are idempotent (the object is rewritten, the work
// message carries a msg id per reduce generation).
func (r *jobRunner) startReduce(ctx context.Context) {
	backoff := retry.NewBackoff(reduceBackoff, nil, nil)
	for {
		err := r.publishReduce(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		delay := backoff.Next()
		r.log.Warn().Err(err).Dur("delay", delay).Msg("publishing the reduce item failed; retrying")
		if retry.Sleep(ctx, nil, delay) != nil {
			return
		}
	}
}

// reduceBackoff spaces the tries of startReduce: 250ms doubling to 5s.
var reduceBackoff = retry.Exponential(250*time.Millisecond, 5*time.Second)

func (r *jobRunner) publishReduce(ctx context.Context) error {
	r.mu.Lock()
	st := r.rec.Status
	spec := r.rec.Spec
	traceparent := r.rec.Trace
	r.mu.Unlock()
	if st.Reduce == nil || st.Reduce.State != "pending" {
		return nil // already done (its result arrived) or superseded
	}
	// The pool's own store: only the agents that run the reduce step read it.
	obs, err := r.c.js.ObjectStore(ctx, r.c.names.ReduceBucket(spec.Pool))
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	gen := st.Reduce.Generation
	name := fmt.Sprintf("reduce/%s/%d/map-results.json", r.id, gen)
	// The map results are streamed into the object: never all in memory.
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 64<<10)
		err := r.writeMapResults(ctx, bw, r.resultsSource(), mapWindowBytes)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "map results of job " + r.id}, pr)
	_ = pr.CloseWithError(errors.New("object written")) // ends the writer if Put returned early
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	wi := wire.WorkItem{
		JobID: r.id, ItemID: messages.ReduceItemID, Index: -1, Payload: json.RawMessage(`{}`),
		Generation: gen, CorrelationID: r.id + ":reduce", Phase: messages.PhaseReduce,
		Reduce: &messages.ReduceInput{
			ResultsObject: name, Successful: st.Succeeded, Failed: st.Failed + st.DeadLettered + st.Skipped,
			Items: st.Items, DeadLettered: st.DeadLettered, Skipped: st.Skipped, NotRun: st.NotRun,
		},
	}
	if sign := r.c.signer(); sign != nil {
		if err := sign(spec.Pool, &wi); err != nil {
			return err
		}
	}
	body, err := json.Marshal(&wi)
	if err != nil {
		return err
	}
	m := nats.NewMsg(r.c.names.WorkSubject(spec.Pool, r.id))
	m.Data = body
	m.Header.Set(messages.HeaderMsgID, wire.WorkMsgID(r.id, messages.ReduceItemID, gen))
	span := r.c.traceReduce(ctx, r.id, traceparent, m)
	defer span.End()
	if _, err := r.c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing the reduce item: %w", err)
	}
	r.log.Info().Int64("successful", wi.Reduce.Successful).Int64("failed", wi.Reduce.Failed).Msg("map phase ended; reduce item published")
	r.c.event(r.id, messages.ReduceStartedEvent(*wi.Reduce))
	return nil
}

// Writing the map results without holding them: a first pass over the
// job's results finds, per item, the stream sequence of the result that
// counts (12 bytes an item); then windows of consecutive items, each
// holding at most mapWindowBytes of outputs (and mapWindowItems items),
// are read again, from the lowest of their sequences to the highest, and
// written in input order. Small outputs take one window, so two passes.
const (
	mapWindowBytes = 8 << 20
	mapWindowItems = 10_000
)

// resultSource calls fn with the job's results messages whose stream
// sequences are in [from, to], in stream order.
type resultSource func(ctx context.Context, from, to uint64, fn func(seq uint64, subject string, data []byte)) error

// resultsSource reads the job's results subject of the results stream.
func (r *jobRunner) resultsSource() resultSource {
	subj := r.c.names.JobResultsFilter(r.id)
	return func(ctx context.Context, from, to uint64, fn func(uint64, string, []byte)) error {
		stream, err := r.c.js.Stream(ctx, r.c.names.ResultsStream())
		if err != nil {
			return err
		}
		// The leader's last (kvleader.LastStored: a full node's replica
		// may answer first).
		last, err := kvleader.LastStored(ctx, r.c.js, r.c.names.ResultsStream(), subj)
		if err != nil {
			return err
		}
		if last == 0 {
			return nil
		}
		to = min(to, last)
		if from > to {
			return nil
		}
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj},
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(from, 1), InactiveThreshold: resultsInactive})
		if err != nil {
			return err
		}
		it, err := cons.Messages(jetstream.PullMaxBytes(natsconn.PullBytes)) // results are up to max_payload each
		if err != nil {
			return err
		}
		defer it.Stop()
		// to is the leader's: the read goes on to it even when the
		// consumer's replica lags and says nothing is pending
		// (kvleader.ReadOn), as a reduce on part of the results would be
		// wrong for good. A replica that delivers nothing for
		// resultsReadIdle while the leader holds more fails the read, and
		// startReduce reads again with a new consumer.
		seen := max(from, 1) - 1
		for {
			wctx, cancel := context.WithTimeout(ctx, resultsReadIdle)
			m, err := it.Next(jetstream.NextContext(wctx))
			cancel()
			if err != nil {
				if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
					return err
				}
				more, err := kvleader.StoredAfter(ctx, r.c.js, r.c.names.ResultsStream(), subj, seen, to)
				if err != nil || !more {
					return err // nil: the rest was deleted meanwhile
				}
				return fmt.Errorf("reading the job's results: nothing after stream sequence %d for %s, the stream holds more up to %d", seen, resultsReadIdle, to)
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seen = md.Sequence.Stream
			fn(seen, m.Subject(), m.Data())
			if more, err := kvleader.ReadOn(ctx, r.c.js, r.c.names.ResultsStream(), subj, md, to); err != nil || !more {
				return err
			}
		}
	}
}

// resultsReadIdle bounds the wait for the next of a job's results when the
// stream's leader holds it (a lagging replica catching up).
const resultsReadIdle = 10 * time.Second

// writeMapResults writes the JSON array of the map results to w: per item
// with a counted outcome, in input order, its latest generation's last
// result (not a late result that was only logged). Memory: 12 bytes an
// item plus one window of at most window bytes of outputs.
func (r *jobRunner) writeMapResults(ctx context.Context, w io.Writer, src resultSource, window int) error {
	r.mu.Lock()
	n := len(r.outcome)
	counted := make([]bool, n)
	for i, oc := range r.outcome {
		switch oc {
		case ocSucceeded, ocFailed, ocDeadLettered, ocSkipped:
			counted[i] = true
		}
	}
	gens := maps.Clone(r.gens)
	r.mu.Unlock()

	var decoded []messages.Result
	// each calls fn with every result of the messages in [from, to] that
	// may be the one counted for its item.
	each := func(from, to uint64, fn func(seq uint64, res *messages.Result)) error {
		return src(ctx, from, to, func(seq uint64, subject string, data []byte) {
			decoded, _ = wire.DecodeResults(data, decoded) // an undecodable message has none
			origin := wire.Origin(r.c.names, subject)
			for i := range decoded {
				res := &decoded[i]
				if res.Phase != "" || res.Outcome == messages.OutcomeReopened || res.Index < 0 || res.Index >= int64(n) ||
					!counted[res.Index] || res.Generation != gens[res.Index] || !r.pools.mayReport(res.Index, origin) {
					continue
				}
				fn(seq, res)
			}
		})
	}
	seqs := make([]uint64, n)
	sizes := make([]uint32, n)
	if err := each(1, math.MaxUint64, func(seq uint64, res *messages.Result) {
		seqs[res.Index] = seq // the last one counts
		sizes[res.Index] = uint32(min(len(res.ItemID)+len(res.Group)+len(res.Output)+len(res.Error)+64, math.MaxUint32))
	}); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "["); err != nil {
		return err
	}
	first := true
	for lo := 0; lo < n; {
		hi, bytes, from, to := lo, 0, uint64(math.MaxUint64), uint64(0)
		for hi < n && hi-lo < mapWindowItems && (hi == lo || bytes+int(sizes[hi]) <= window) {
			if seq := seqs[hi]; seq != 0 {
				bytes += int(sizes[hi])
				from, to = min(from, seq), max(to, seq)
			}
			hi++
		}
		if to > 0 {
			outs := make(map[int64]messages.MapOutput)
			err := each(from, to, func(seq uint64, res *messages.Result) {
				if res.Index >= int64(lo) && res.Index < int64(hi) && seqs[res.Index] == seq {
					outs[res.Index] = messages.MapOutput{ItemID: res.ItemID, Index: res.Index, Group: res.Group,
						Outcome: res.Outcome, Output: res.Output, Error: res.Error}
				}
			})
			if err != nil {
				return err
			}
			for i := int64(lo); i < int64(hi); i++ {
				out, ok := outs[i]
				if !ok {
					continue
				}
				data, err := json.Marshal(&out)
				if err != nil {
					return err
				}
				if !first {
					data = append([]byte{','}, data...)
				}
				first = false
				if _, err := w.Write(data); err != nil {
					return err
				}
			}
		}
		lo = hi
	}
	_, err := io.WriteString(w, "]")
	return err
}

// applyReduce records the reduce item's outcome, which completes the job:
// its state is the map phase's, or failed when the reduce failed.
func (r *jobRunner) applyReduce(res *messages.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.rec.Status
	if st.Phase != messages.PhaseReducing || st.Reduce == nil || st.Reduce.State != "pending" || res.Generation != st.Reduce.Generation {
		return // a duplicate, or the result of an earlier reduce generation
	}
	if !r.fireLocked(reduceDone) {
		return // cannot happen: a record reducing is a runner replaying or reducing
	}
	st.Reduce = &messages.ReduceStatus{State: res.Outcome, Generation: res.Generation, Output: res.Output, Error: res.Error, Agent: res.Agent}
	state := st.MapState
	if res.Outcome != messages.OutcomeSucceeded {
		st.Reduce.State = messages.OutcomeFailed
		state = messages.StateFailed
	}
	reduce := *st.Reduce
	r.deferLocked(func() { r.c.event(r.id, messages.ReduceCompletedEvent(reduce)) })
	r.finishLocked(state, st.MapReason)
}
