package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
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
	outputs, err := r.mapOutputs(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(outputs)
	if err != nil {
		return err
	}
	obs, err := r.c.js.ObjectStore(ctx, r.c.names.InputsBucket())
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	r.mu.Lock()
	st := r.rec.Status
	spec := r.rec.Spec
	r.mu.Unlock()
	if st.Reduce == nil || st.Reduce.State != "pending" {
		return nil // already done (its result arrived) or superseded
	}
	gen := st.Reduce.Generation
	name := fmt.Sprintf("reduce/%s/%d/map-results.json", r.id, gen)
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "map results of job " + r.id}, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	wi := messages.WorkItem{
		JobID: r.id, ItemID: messages.ReduceItemID, Index: -1, Payload: json.RawMessage(`{}`),
		Generation: gen, CorrelationID: r.id + ":reduce", Phase: messages.PhaseReduce,
		Reduce: &messages.ReduceInput{
			ResultsObject: name, Successful: st.Succeeded, Failed: st.Failed + st.DeadLettered + st.Skipped,
			Items: st.Items, DeadLettered: st.DeadLettered, Skipped: st.Skipped, NotRun: st.NotRun,
		},
	}
	body, err := json.Marshal(&wi)
	if err != nil {
		return err
	}
	m := nats.NewMsg(r.c.names.WorkSubject(spec.Pool, r.id))
	m.Data = body
	m.Header.Set(messages.HeaderMsgID, messages.WorkMsgID(r.id, messages.ReduceItemID, gen))
	if _, err := r.c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing the reduce item: %w", err)
	}
	r.log.Info().Int64("successful", wi.Reduce.Successful).Int64("failed", wi.Reduce.Failed).Msg("map phase ended; reduce item published")
	r.c.event(r.id, messages.ReduceStartedEvent(*wi.Reduce))
	return nil
}

// mapOutputs reads the job's results and keeps, per item, the result that
// counts: the latest generation, and not a late result that was only
// logged. Outputs of every counted item are held in memory while the file
// is written (reduce jobs with huge outputs should keep them small: each
// output is the stdout tail the agents keep, MaxOutputBytes).
func (r *jobRunner) mapOutputs(ctx context.Context) ([]messages.MapOutput, error) {
	subj := r.c.names.JobResultsFilter(r.id)
	stream, err := r.c.js.Stream(ctx, r.c.names.ResultsStream())
	if err != nil {
		return nil, err
	}
	last, err := stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return []messages.MapOutput{}, nil
	}
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(natsconn.PullBytes)) // results are up to max_payload each
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	type kept struct {
		out messages.MapOutput
		gen int
	}
	byIndex := map[int64]kept{}
	var decoded []messages.Result
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, err
		}
		decoded, _ = messages.DecodeResults(m.Data(), decoded) // an undecodable message has none
		origin := r.c.names.Origin(m.Subject())
		for i := range decoded {
			res := &decoded[i]
			if res.Phase != "" || res.Outcome == messages.OutcomeReopened || !r.pools.mayReport(res.Index, origin) {
				continue
			}
			if k, ok := byIndex[res.Index]; !ok || res.Generation >= k.gen {
				byIndex[res.Index] = kept{gen: res.Generation, out: messages.MapOutput{
					ItemID: res.ItemID, Index: res.Index, Group: res.Group, Outcome: res.Outcome,
					Output: res.Output, Error: res.Error,
				}}
			}
		}
		md, err := m.Metadata()
		if err != nil || md.Sequence.Stream >= last.Sequence {
			break
		}
	}
	r.mu.Lock()
	out := make([]messages.MapOutput, 0, len(byIndex))
	for idx, k := range byIndex {
		if idx < 0 || idx >= int64(len(r.outcome)) {
			continue
		}
		switch r.outcome[idx] {
		case ocSucceeded, ocFailed, ocDeadLettered, ocSkipped:
			if k.gen == r.gens[idx] {
				out = append(out, k.out)
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b messages.MapOutput) int { return cmp.Compare(a.Index, b.Index) })
	return out, nil
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
