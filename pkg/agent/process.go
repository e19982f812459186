package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/pkg/budget"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// maxMessageBytes bounds error messages kept in histories and results.
const maxMessageBytes = messages.MaxErrorBytes

// messageRoom is kept under the server's max_payload for headers and
// protocol overhead when an item's state or result is encoded to fit.
const messageRoom = 1024

// maxPayload is the limit of the agent's messages: the server's
// max_payload less messageRoom.
func (a *Agent) maxPayload() int { return int(a.nc.MaxPayload()) - messageRoom }

// item is one delivery being processed.
type item struct {
	m   jetstream.Msg
	md  *jetstream.MsgMetadata
	wi  messages.WorkItem
	job *job
	set *stepSet // the job's map steps, or its reduce steps
	mv  *shell.MapVars
	st  messages.ItemState
	rev uint64 // revision of the item's state key; 0 = none read or written
	key string
	t0  time.Time

	// breaker is the job's circuit breaker for this delivery (zero: none).
	breaker breakerTicket

	// carry is what a replay continues from (see carriedAttempts).
	carry carried
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
func carriedAttempts(wi *messages.WorkItem) carried {
	if wi.ResetAttempts || wi.ReplayCount == 0 || wi.Phase == messages.PhaseReduce {
		return carried{}
	}
	for i := len(wi.History) - 1; i >= 0; i-- {
		if h := wi.History[i]; h.Generation < wi.Generation && h.Attempt > 0 {
			return carried{ok: true, step: h.Step, attempts: h.Attempt}
		}
	}
	return carried{}
}

// safeProcess runs process. A panic there (a bug some message found) would
// end the agent, and the message, redelivered, would end the next one: the
// message is dead-lettered as poison instead, and the agent goes on.
func (a *Agent) safeProcess(ctx context.Context, m jetstream.Msg) {
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
		it := &item{m: m}
		md, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		it.md = md
		_ = json.Unmarshal(m.Data(), &it.wi)
		a.poison(ctx, it, fmt.Errorf("the agent panicked handling this message: %v", p))
	}()
	a.process(ctx, m)
}

// process handles one delivery end to end. It never returns an error: every
// path ends in an ack, a term, a delayed nak or (for a fenced-off zombie)
// nothing, leaving the message to its current holder.
func (a *Agent) process(ctx context.Context, m jetstream.Msg) {
	it := &item{m: m, t0: a.cfg.Clock.Now()}
	md, err := m.Metadata()
	if err != nil {
		a.log.Error().Err(err).Msg("message without metadata; terminated")
		_ = m.Term()
		return
	}
	it.md = md
	if err := json.Unmarshal(m.Data(), &it.wi); err != nil || it.wi.JobID == "" || it.wi.ItemID == "" {
		a.poison(ctx, it, err)
		return
	}
	if err := checkWorkItem(m.Subject(), &it.wi); err != nil {
		a.poison(ctx, it, err)
		return
	}
	it.key = messages.ItemKey(a.cfg.Pool, it.wi.JobID, it.wi.ItemID)
	log := a.log.With().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Uint64("num_delivered", md.NumDelivered).Logger()

	it.job, err = a.jobs.get(ctx, it.wi.JobID)
	if errors.Is(err, errJobNotFound) {
		a.poison(ctx, it, fmt.Errorf("job %q not found", it.wi.JobID))
		return
	}
	if err != nil {
		log.Warn().Err(err).Msg("cannot load job; retrying later")
		a.nakDelay(it, 2*time.Second)
		return
	}
	it.set = it.job.mapSteps
	if it.wi.Phase == messages.PhaseReduce {
		if it.job.reduce == nil || it.wi.Reduce == nil {
			a.poison(ctx, it, errors.New("reduce item of a job without reduce steps"))
			return
		}
		it.set = it.job.reduce
		cleanup, err := a.prepareReduce(ctx, it)
		if err != nil {
			log.Warn().Err(err).Msg("cannot fetch the map results; retrying later")
			a.nakDelay(it, 2*time.Second)
			return
		}
		defer cleanup()
	} else if it.wi.Generation == 0 && a.jobs.isEnded(it.wi.JobID) {
		// The job stopped, was cancelled or completed early: the coordinator
		// counted this item not_run. Replays (generation > 0) still run.
		a.metrics.items.WithLabelValues(messages.OutcomeNotRun).Inc()
		_ = m.Term()
		return
	}

	it.st = messages.ItemState{JobID: it.wi.JobID, ItemID: it.wi.ItemID, Generation: it.wi.Generation}
	it.carry = carriedAttempts(&it.wi)
	if md.NumDelivered > 1 || it.wi.Generation > 0 {
		if err := a.loadState(ctx, it); err != nil {
			log.Warn().Err(err).Msg("cannot read item state; retrying later")
			a.nakDelay(it, time.Second)
			return
		}
	}
	if it.st.Final != "" {
		a.finalize(ctx, it) // a redelivery of an item that already gave up
		return
	}
	if !a.admitBreaker(ctx, it) {
		return // parked by the job's circuit breaker
	}
	a.runSteps(ctx, it)
}

// maxObjectName bounds the map-results object a reduce item names: object
// names become subjects, and a subject over the server's control line (4
// KiB) closes the connection.
const maxObjectName = 1024

// checkWorkItem refuses a work message whose body does not belong on its
// subject (<prefix>.work.<pool>.<job>), or that names what no coordinator
// would: the job id and the reduce object go into KV keys and subjects.
func checkWorkItem(subject string, wi *messages.WorkItem) error {
	if err := messages.ValidToken(wi.JobID); err != nil {
		return fmt.Errorf("job_id: not a job id: %w", err)
	}
	if i := strings.LastIndexByte(subject, '.'); i < 0 || subject[i+1:] != wi.JobID {
		return fmt.Errorf("job_id %q does not match the subject %q", wi.JobID, subject)
	}
	if r := wi.Reduce; r != nil && (r.ResultsObject == "" || len(r.ResultsObject) > maxObjectName) {
		return fmt.Errorf("reduce.results_object: %d bytes, want 1 to %d", len(r.ResultsObject), maxObjectName)
	}
	return nil
}

// loadState reads the item's persisted retry state for this generation.
func (a *Agent) loadState(ctx context.Context, it *item) error {
	e, err := a.items.Get(ctx, it.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	it.rev = e.Revision()
	var st messages.ItemState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("corrupt item state replaced")
		return nil
	}
	if st.Generation == it.wi.Generation && !(it.wi.ResetAttempts && it.md.NumDelivered == 1) {
		it.st = st
	}
	return nil
}

// saveState persists the item's state, fenced by revision: a conflict means
// another agent now holds the item, and this one must step aside.
func (a *Agent) saveState(ctx context.Context, it *item) error {
	data, err := messages.EncodeItemState(&it.st, a.maxPayload())
	if err != nil {
		return err
	}
	var rev uint64
	if it.rev == 0 {
		rev, err = a.items.Create(ctx, it.key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// State of an earlier generation, or of a run before a
			// coordinator republished the item: take it over.
			var e jetstream.KeyValueEntry
			if e, err = a.items.Get(ctx, it.key); err == nil {
				rev, err = a.items.Update(ctx, it.key, data, e.Revision())
			}
		}
	} else {
		rev, err = a.items.Update(ctx, it.key, data, it.rev)
	}
	if err != nil {
		return err
	}
	it.rev = rev
	return nil
}

func isFenced(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// runSteps runs the item's steps from the persisted step on.
func (a *Agent) runSteps(ctx context.Context, it *item) {
	steps := it.set.steps
	for it.st.Step < len(steps) {
		i := it.st.Step
		if it.carry.ok && it.carry.step == i && it.st.StepAttempt == 0 {
			it.st.StepAttempt = it.carry.attempts
		}
		attempt := it.st.StepAttempt + 1
		out, f, dur := a.runStep(ctx, it, i, attempt)
		if ctx.Err() != nil {
			// Shutdown cancelled the step: hand the item back at once, unspent.
			_ = it.m.Nak()
			a.metrics.attempts.WithLabelValues("cancelled").Inc()
			return
		}
		if f == nil {
			a.metrics.attempts.WithLabelValues("success").Inc()
			it.st.Ran = append(it.st.Ran, messages.StepRun{Step: i, Runs: 1, DurationMS: dur.Milliseconds()})
			a.stepDone(it, out)
			continue
		}
		a.metrics.attempts.WithLabelValues("failure").Inc()
		pol := it.set.policies[i]
		d := pol.Decide(a.cfg.Clock.Now(), retry.StateFromItem(&it.st), *f, a.cfg.Rand)
		att := a.attempt(it, i, attempt, f, d.Class, dur)
		// The delivery's first failed step run decides its breaker outcome.
		if d.Action == retry.ActionSnooze || d.Reason == messages.ReasonPermanent || d.Reason == messages.ReasonNotRetryable {
			a.ignoreBreaker(ctx, it) // the item's own fault, or a snooze: not the dependency's
		} else {
			a.recordBreaker(ctx, it, true)
		}
		if d.Action != retry.ActionGiveUp && a.lastDelivery(it) {
			// The server would not redeliver after this nak (MaxDeliver):
			// give up now, with the item's outcome recorded.
			d.State.ApplyTo(&it.st)
			d.Action, d.Reason = retry.ActionGiveUp, messages.ReasonMaxDeliveries
			d.Err = &retry.GiveUpError{Reason: messages.ReasonMaxDeliveries, Attempts: d.State.Attempts, Err: f.Error()}
		}
		switch d.Action {
		case retry.ActionSnooze:
			att.Decision, att.DelayMS = "snooze", d.Delay.Milliseconds()
			a.retryLater(ctx, it, att, d.Delay, "snooze")
			return
		case retry.ActionRetry:
			granted, reason, err := a.claim(ctx, it)
			if err != nil {
				// The budget could not be read: retry the whole delivery
				// later without recording the attempt.
				a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("budget claim failed; retrying later")
				a.nakDelay(it, time.Second)
				return
			}
			if granted {
				d.State.ApplyTo(&it.st)
				it.st.Retries++
				att.Decision, att.DelayMS = "retry", d.Delay.Milliseconds()
				a.metrics.retryDelay.Observe(d.Delay.Seconds())
				a.retryLater(ctx, it, att, d.Delay, "retry")
				return
			}
			d.State.ApplyTo(&it.st)
			d.Action, d.Reason = retry.ActionGiveUp, reason
			d.Err = &retry.GiveUpError{Reason: reason, Attempts: d.State.Attempts, Err: f.Error()}
		case retry.ActionGiveUp:
			d.State.ApplyTo(&it.st)
		}
		// The step gave up; its on_failure decides what follows.
		fa := pol.OnFailure()
		var fbErr error
		if fa.NeedsFallback() {
			var fbOut string
			fbOut, fbErr = a.runFallback(ctx, it, i, attempt)
			if fbErr == nil {
				att.Decision = "fallback"
				a.pushHistory(it, att)
				a.stepDone(it, fbOut)
				continue
			}
		}
		switch fa.Outcome(fbErr) {
		case retry.StepContinue:
			att.Decision = "continue"
			a.pushHistory(it, att)
			a.stepDone(it, "")
			continue
		default:
			att.Decision = "give_up"
			a.pushHistory(it, att)
			err := d.Err
			if fbErr != nil {
				err = errors.Join(d.Err, fmt.Errorf("fallback: %w", fbErr))
			}
			a.giveUp(ctx, it, d.Reason, err, d.Class)
			return
		}
	}
	a.recordBreaker(ctx, it, false)
	a.succeed(ctx, it)
}

// lastDelivery reports whether this is the consumer's last delivery of the
// message: a delayed nak now would leave the item with no outcome.
func (a *Agent) lastDelivery(it *item) bool {
	return a.maxDeliver > 0 && it.md.NumDelivered >= a.maxDeliver
}

// stepDone moves the item to its next step.
func (a *Agent) stepDone(it *item, out string) {
	it.st.Outputs = append(it.st.Outputs, truncate(out, a.cfg.MaxOutputBytes))
	it.st.Step++
	retry.State{}.ApplyTo(&it.st)
}

// claim spends one unit of the job's retry budget for the item.
func (a *Agent) claim(ctx context.Context, it *item) (granted bool, reason string, err error) {
	g, err := a.budget.Claim(ctx, it.wi.JobID, it.st.Retries)
	if err != nil {
		return false, "", err
	}
	if !g.Granted {
		a.metrics.budgetDenied.WithLabelValues(g.Deny.Reason).Inc()
		a.budgetEvent(it, g.Deny)
		return false, g.Deny.Reason, nil
	}
	return true, "", nil
}

// retryLater persists the attempt and naks the message with delay.
func (a *Agent) retryLater(ctx context.Context, it *item, att messages.Attempt, delay time.Duration, kind string) {
	a.pushHistory(it, att)
	if err := a.saveState(ctx, it); err != nil {
		if isFenced(err) {
			a.log.Warn().Str("item_id", it.wi.ItemID).Msg("item state changed under us: another agent holds the item; stepping aside")
			return
		}
		a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("cannot persist retry state; redelivering without it")
		a.nakDelay(it, delay)
		return
	}
	a.metrics.retries.WithLabelValues(kind).Inc()
	a.nakDelay(it, delay)
}

// nakDelay naks with a delay; never a bare Nak for a failure (docs/jetstream.md §2).
func (a *Agent) nakDelay(it *item, d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	if err := it.m.NakWithDelay(d); err != nil {
		a.log.Debug().Err(err).Msg("nak failed; AckWait will redeliver")
	}
}

// giveUp applies the workflow's on_item_failure and records the outcome:
// dlq and stop dead-letter the item (the coordinator stops the job), skip
// records it skipped, retry runs the whole item again while
// error_policy.retry_config allows, custom runs the custom step and records
// the item failed (dead-lettered if the custom step fails too). A failed
// reduce item is recorded failed: its outcome is the job's.
func (a *Agent) giveUp(ctx context.Context, it *item, reason string, err error, class string) {
	outcome := messages.OutcomeDeadLettered
	if it.wi.Phase == messages.PhaseReduce {
		outcome = messages.OutcomeFailed
	} else {
		switch it.job.onItem {
		case messages.ItemFailureSkip:
			outcome = messages.OutcomeSkipped
		case messages.ItemFailureRetry:
			handled, why := a.retryItem(ctx, it, err)
			if handled {
				return
			}
			reason = why
		case messages.ItemFailureCustom:
			if cerr := a.runCustom(ctx, it, reason, err); cerr != nil {
				reason = messages.ReasonCustomFailed
				err = errors.Join(err, fmt.Errorf("on_item_failure custom step: %w", cerr))
			} else {
				outcome = messages.OutcomeFailed
			}
		}
	}
	it.st.Final, it.st.Reason, it.st.ErrorClass = outcome, reason, class
	if err != nil {
		it.st.Error = truncate(err.Error(), maxMessageBytes)
	}
	if err := a.saveState(ctx, it); err != nil {
		if isFenced(err) {
			a.log.Warn().Str("item_id", it.wi.ItemID).Msg("item state changed under us; stepping aside")
			return
		}
		a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Msg("cannot persist give-up; retrying later")
		a.nakDelay(it, time.Second)
		return
	}
	a.finalize(ctx, it)
}

// finalize records a given-up item: the DLQ entry first (PubAck awaited),
// then the result, then Term. Every step is idempotent, so a redelivery
// after a crash repeats it safely.
func (a *Agent) finalize(ctx context.Context, it *item) {
	if it.st.Final == messages.OutcomeDeadLettered {
		if err := a.dlq.Write(ctx, a.dlqEntry(it)); err != nil {
			d := min(time.Duration(it.md.NumDelivered)*time.Second, 30*time.Second)
			a.log.Warn().Err(err).Str("item_id", it.wi.ItemID).Dur("delay", d).Msg("dead-letter publish failed; item kept, retrying later")
			a.metrics.dlqFailures.Inc()
			a.nakDelay(it, d)
			return
		}
		a.metrics.deadLettered.WithLabelValues(it.st.Reason).Inc()
		if h := a.cfg.AfterDeadLetter; h != nil && !h(it.wi.JobID, it.wi.ItemID) {
			return
		}
	}
	res := a.result(it, it.st.Final)
	res.Reason, res.Error, res.ErrorClass = it.st.Reason, it.st.Error, it.st.ErrorClass
	if n := len(it.st.Outputs); n > 0 {
		res.Output = it.st.Outputs[n-1]
	}
	res.Signature = retry.Signature(it.st.Error)
	a.report(it, res, true, false)
}

// succeed reports a finished item.
func (a *Agent) succeed(_ context.Context, it *item) {
	res := a.result(it, messages.OutcomeSucceeded)
	if n := len(it.st.Outputs); n > 0 {
		res.Output = it.st.Outputs[n-1]
	}
	a.report(it, res, false, it.rev != 0)
}

func (a *Agent) result(it *item, outcome string) *messages.Result {
	now := a.cfg.Clock.Now()
	attempts := 0
	for _, h := range it.st.History {
		if h.Generation == it.wi.Generation {
			attempts++
		}
	}
	res := &messages.Result{
		JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
		Outcome: outcome, Generation: it.wi.Generation, Phase: it.wi.Phase,
		Attempts: attempts + boolInt(outcome == messages.OutcomeSucceeded), Retries: it.st.Retries,
		Agent: a.cfg.Name, FinishedAt: now, DurationMS: now.Sub(it.t0).Milliseconds(),
	}
	if it.set != nil && len(it.set.steps) > 1 {
		res.Steps = stepRuns(it)
	}
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
		if h.Generation == it.wi.Generation {
			add(h.Step, h.DurationMS)
		}
	}
	for _, r := range it.st.Ran {
		add(r.Step, r.DurationMS)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Step < runs[j].Step })
	return runs
}

// report publishes the result asynchronously; the ack loop acks (or terms)
// the work message once the result is stored.
func (a *Agent) report(it *item, res *messages.Result, term, deleteState bool) {
	// Encoded to fit: a handler's output may be as large as MaxOutputBytes
	// says, and the item id as large as an item may be.
	data, err := messages.EncodeResult(res, a.maxPayload())
	if err != nil {
		a.log.Error().Err(err).Msg("cannot encode result")
		a.nakDelay(it, time.Second)
		return
	}
	msg := nats.NewMsg(a.names.ResultSubject(a.cfg.Pool, res.JobID))
	msg.Data = data
	// No Nats-Msg-Id: the coordinator de-duplicates results by item index
	// and generation, and server-side dedupe would cost a map entry per item.
	fut, err := a.js.PublishMsgAsync(msg)
	if err != nil {
		a.log.Warn().Err(err).Msg("result publish failed; item redelivered later")
		a.nakDelay(it, time.Second)
		return
	}
	a.metrics.items.WithLabelValues(res.Outcome).Inc()
	p := pendingAck{fut: fut, msg: it.m, term: term}
	if deleteState {
		p.key, p.rev = it.key, it.rev
	}
	a.acks <- p
}

type pendingAck struct {
	fut  jetstream.PubAckFuture
	msg  jetstream.Msg
	term bool
	key  string
	rev  uint64
}

// ackLoop acknowledges work messages in the order their results are stored.
func (a *Agent) ackLoop() {
	for p := range a.acks {
		var err error
		select {
		case <-p.fut.Ok():
		case err = <-p.fut.Err():
		}
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = a.js.PublishMsg(ctx, p.fut.Msg())
			cancel()
		}
		if err != nil {
			a.log.Warn().Err(err).Msg("result not stored; item redelivered later")
			_ = p.msg.NakWithDelay(time.Second)
			continue
		}
		if p.key != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = a.items.Delete(ctx, p.key, jetstream.LastRevision(p.rev))
			cancel()
		}
		if p.term {
			err = p.msg.Term()
		} else {
			err = p.msg.Ack()
		}
		if err != nil {
			a.log.Debug().Err(err).Msg("ack failed; a redelivery will re-report")
		}
	}
}

// attempt builds the history record of a failed attempt.
func (a *Agent) attempt(it *item, step, attempt int, f *retry.Failure, class string, dur time.Duration) messages.Attempt {
	msg := f.Message
	if msg == "" && f.Err != nil {
		msg = f.Err.Error()
	}
	return messages.Attempt{
		Attempt: attempt, Step: step, StepName: it.set.stepName(step), Agent: a.cfg.Name,
		Time: a.cfg.Clock.Now(), DurationMS: dur.Milliseconds(), ErrorClass: class,
		Message: truncate(msg, maxMessageBytes), ExitCode: f.ExitCode, TimedOut: f.TimedOut,
		Generation: it.wi.Generation,
	}
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
		Attempts: hist, AttemptsDropped: it.wi.HistoryDropped + it.st.HistoryDropped, Reason: it.st.Reason, Error: it.st.Error, ErrorClass: it.st.ErrorClass,
		Signature: retry.Signature(it.st.Error), ReplayCount: it.wi.ReplayCount,
		DeadLetteredAt: a.cfg.Clock.Now(), Agent: a.cfg.Name,
	}
}

// maxPoisonID bounds the item id a poison message's body may give its
// entry; a longer one is replaced by the message's sequence.
const maxPoisonID = 1024

// poison dead-letters an undecodable message (or one of an unknown job) so
// it is never retried forever, then terminates it.
func (a *Agent) poison(ctx context.Context, it *item, cause error) {
	// The subject (<prefix>.work.<pool>.<job>) names the job; the body of a
	// poison message may name anything.
	job := it.wi.JobID
	if parts := strings.Split(it.m.Subject(), "."); len(parts) >= 4 {
		job = parts[len(parts)-1]
	}
	reason := messages.ReasonPoison
	if errors.Is(cause, errJobNotFound) || (cause != nil && strings.Contains(cause.Error(), "not found")) {
		reason = messages.ReasonJobGone
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
		DeadLetteredAt: a.cfg.Clock.Now(), Agent: a.cfg.Name,
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
	_ = it.m.Term()
}

// runStep runs one attempt of step i; f is nil on success.
func (a *Agent) runStep(ctx context.Context, it *item, i, attempt int) (out string, f *retry.Failure, dur time.Duration) {
	step := &it.set.steps[i]
	start := a.cfg.Clock.Now()
	defer func() { dur = a.cfg.Clock.Now().Sub(start) }()
	if step.Shell != "" {
		out, f = a.runShell(ctx, it, it.set.commands[i], step.Timeout.D(), attempt)
		a.metrics.stepDuration.WithLabelValues("shell").Observe(time.Since(start).Seconds())
		return out, f, 0
	}
	out, f = a.runHandler(ctx, it, i, step, attempt)
	a.metrics.stepDuration.WithLabelValues("handler").Observe(time.Since(start).Seconds())
	return out, f, 0
}

func (a *Agent) shellVars(it *item, attempt int) shell.Vars {
	return shell.Vars{Item: it.wi.Payload, ItemID: it.wi.ItemID, JobID: it.wi.JobID, Attempt: attempt, Map: it.mv}
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
	vars := a.shellVars(it, attempt)
	env := make([]string, 0, len(a.stepEnv)+len(it.job.env)+8+len(extraEnv))
	env = append(env, a.stepEnv...)
	env = append(env, it.job.env...)
	env = append(env, vars.Environ()...)
	env = append(env, extraEnv...)
	vars.LookupEnv = lookupIn(env)
	script, err := c.script.Expand(vars)
	if err != nil {
		return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("expanding the command: %w", err))}
	}
	res := shell.Run(ctx, shell.Command{
		Script: script, Env: env, Dir: a.cfg.WorkDir, Timeout: a.stepTimeout(timeout),
		Heartbeat: func() { _ = it.m.InProgress() }, HeartbeatInterval: a.hb,
	})
	if res.Killed > 0 {
		a.metrics.leftoversKilled.Add(float64(res.Killed))
		a.log.Info().Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Int("processes", res.Killed).
			Msg("killed the processes a shell step left running")
	}
	if !res.Failed() {
		return res.Stdout, nil
	}
	f := &retry.Failure{Message: res.Message(), Stderr: res.Stderr, TimedOut: res.TimedOut}
	if res.Err == nil && res.Signal == 0 && !res.TimedOut && !res.Cancelled {
		code := res.ExitCode
		f.ExitCode = &code
	}
	return "", f
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

func (a *Agent) runFallback(ctx context.Context, it *item, i, attempt int) (string, error) {
	out, f := a.runShell(ctx, it, it.set.fallbacks[i], it.set.steps[i].Timeout.D(), attempt)
	if f != nil {
		return "", f.Error()
	}
	return out, nil
}

func (a *Agent) runHandler(ctx context.Context, it *item, i int, step *messages.Step, attempt int) (string, *retry.Failure) {
	return a.invokeHandler(ctx, it, step, &Call{
		JobID: it.wi.JobID, ItemID: it.wi.ItemID, Index: it.wi.Index, Group: it.wi.Group,
		Step: i, StepName: it.set.stepName(i), Attempt: attempt, Item: it.wi.Payload, With: step.With,
		Map: mapResults(it.mv),
	})
}

// invokeHandler runs step's handler with call, under the step's timeout
// and with heartbeats.
func (a *Agent) invokeHandler(ctx context.Context, it *item, step *messages.Step, call *Call) (string, *retry.Failure) {
	fn, ok := a.handler(step.Handler)
	if !ok {
		return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("no handler %q registered on agent %s (pool %s)", step.Handler, a.cfg.Name, a.cfg.Pool))}
	}
	hctx, cancel := context.WithTimeout(ctx, a.stepTimeout(step.Timeout.D()))
	defer cancel()
	stopHB := a.heartbeat(it.m)
	v, err := callHandler(hctx, fn, call)
	stopHB()
	if err != nil {
		timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		return "", &retry.Failure{Err: err, TimedOut: timedOut}
	}
	return outputText(v), nil
}

// callHandler runs fn, turning a panic into an error.
func callHandler(ctx context.Context, fn HandlerFunc, c *Call) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return fn(ctx, c)
}

// heartbeat sends InProgress every interval until the returned func is called.
func (a *Agent) heartbeat(m jetstream.Msg) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // the callback may fire before t is assigned (a short heartbeat)
	defer mu.Unlock()
	t = time.AfterFunc(a.hb, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = m.InProgress()
		t.Reset(a.hb)
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// budgetEvent publishes RetryBudgetExhausted (best effort).
func (a *Agent) budgetEvent(it *item, d *budget.Deny) {
	data, _ := json.Marshal(map[string]any{
		"job_id": it.wi.JobID, "item_id": it.wi.ItemID, "scope": d.Scope(), "reason": d.Reason,
		"consumed": d.Consumed, "limit": d.Limit,
	})
	body, _ := json.Marshal(messages.Event{Type: "RetryBudgetExhausted", JobID: it.wi.JobID, Time: a.cfg.Clock.Now(), Data: data})
	m := nats.NewMsg(a.names.AgentEventSubject(a.cfg.Pool, it.wi.JobID, messages.EventBudget))
	m.Data = body
	m.Header.Set(messages.HeaderEventType, "RetryBudgetExhausted")
	_, _ = a.js.PublishMsgAsync(m)
}
