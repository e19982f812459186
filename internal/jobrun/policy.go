package jobrun

import (
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// checkLocked applies the job's policies after a result (res, nil at the
// end of the results replay): [retry.Workflow.MapEnd] decides error_policy
// stops and completion, the decision the outage simulator makes too; then
// best_effort's min_groups. Nothing applies before the results replay has
// caught up (the counts are partial), after the map phase ended, and
// error_policy not to a job reopened by a DLQ replay (it already ended once
// for its own reason; the replayed items only settle).
func (r *jobRunner) checkLocked(res *messages.Result) {
	if !r.life.deciding() {
		return
	}
	st := &r.rec.Status
	reopenedJob := st.MapReason != ""
	failed := res != nil && (res.Outcome == messages.OutcomeFailed || res.Outcome == messages.OutcomeDeadLettered)
	end, state, reason := r.workflow.MapEnd(r.tallyLocked(), failed, res != nil && !reopenedJob)
	switch {
	case end && reason != messages.CompletionAllCompleted:
		r.endMapLocked(state, reason)
		return
	case end:
		if r.c.replayHolding(r.id) {
			return // a DLQ replay of the job is under way; it ends after it (replayreopen.go)
		}
		state = r.completionStateLocked()
		if reopenedJob {
			reason = st.MapReason
			if st.MapState == messages.StateStopped || st.MapState == messages.StateCancelled {
				state = st.MapState
			}
		}
		r.endMapLocked(state, reason)
		return
	}
	if be := st.BestEffort; be != nil && !reopenedJob && r.groupsCompletedLocked() >= be.MinGroups {
		r.endMapLocked(r.completionStateLocked(), messages.CompletionMinGroups)
	}
}

// tallyLocked are the job's counts as retry.Workflow.MapEnd reads them.
func (r *jobRunner) tallyLocked() retry.Tally {
	st := &r.rec.Status
	return retry.Tally{Items: st.Items, Succeeded: st.Succeeded, Failed: st.Failed, DeadLettered: st.DeadLettered, Skipped: st.Skipped, NotRun: st.NotRun}
}

// completionStateLocked is the state of a job completing now: a
// best-effort job succeeds when at least min_groups groups completed; any
// other job when no item failed.
func (r *jobRunner) completionStateLocked() string {
	st := &r.rec.Status
	if be := st.BestEffort; be != nil {
		if r.groupsCompletedLocked() >= be.MinGroups {
			return messages.StateSucceeded
		}
		return messages.StateFailed
	}
	return r.tallyLocked().State()
}

// groupsCompletedLocked counts the groups whose items all ended without a
// failure (a job without group_by is one group).
func (r *jobRunner) groupsCompletedLocked() int {
	st := &r.rec.Status
	if len(st.Groups) == 0 {
		g := messages.GroupStatus{Items: st.Items, Done: st.Done(), Failed: st.Failed + st.DeadLettered}
		if g.Complete() {
			return 1
		}
		return 0
	}
	return r.completeGroups
}

// tick checks the best-effort deadline on the coordinator's clock.
func (r *jobRunner) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.life.deciding() || r.rec.Deadline == nil || r.rec.Status.MapReason != "" {
		return
	}
	if r.c.cfg.hooks.Clock.Now().Before(*r.rec.Deadline) {
		return
	}
	r.endMapLocked(r.completionStateLocked(), messages.CompletionDeadline)
}

// endMap ends the map phase (a stop, cancel or input error).
func (r *jobRunner) endMap(state, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endMapLocked(state, reason)
}

// endMapLocked ends the map phase: items without an outcome become not_run,
// and the job either moves on to its reduce phase or finishes. The run loop
// then purges the queued items and publishes the events. It does nothing
// when the map phase already ended (the lifecycle refuses a second end).
func (r *jobRunner) endMapLocked(state, reason string) {
	reduce := state != messages.StateCancelled && r.rec.Spec != nil && len(r.rec.Spec.Reduce) > 0
	t := mapEndFinish
	if reduce {
		t = mapEndReduce
	}
	if !r.fireLocked(t) {
		return
	}
	st := &r.rec.Status
	if st.State == messages.StatePaused {
		st.State = messages.StateRunning // nothing is left to pause (pause.go)
	}
	st.PausedBy = ""
	// Every item without an outcome is not run, replayed ones included:
	// the purge that follows removes their queued messages too.
	for i, oc := range r.outcome {
		if oc == ocNone {
			r.outcome[i] = ocNotRun
			st.NotRun++
		}
	}
	st.MapState, st.MapReason = state, reason
	if be := st.BestEffort; be != nil {
		be.GroupsCompleted = r.groupsCompletedLocked()
		be.Success = be.GroupsCompleted >= be.MinGroups
	}
	r.dirty = true
	r.endSnap = *st
	copyStatus(&r.endSnap)
	if reduce {
		gen := 1
		if st.Reduce != nil {
			gen = st.Reduce.Generation + 1
		}
		st.Reduce = &messages.ReduceStatus{State: "pending", Generation: gen}
	} else {
		r.finishLocked(state, reason)
	}
	r.wakeUp()
}

// finishLocked records the job's end, once the lifecycle moved to
// lingering (the map phase ended without a reduce, or the reduce did).
func (r *jobRunner) finishLocked(state, reason string) {
	st := &r.rec.Status
	st.State, st.CompletionReason = state, reason
	now := r.c.cfg.hooks.Clock.Now()
	st.FinishedAt = &now
	r.dirty = true
	if r.collector != nil {
		if evs := r.collector.Flush(); len(evs) > 0 {
			r.deferLocked(func() { r.errorBatch(evs) })
		}
	}
	r.wakeUp()
}

// afterMapEnd publishes what follows the end of the map phase: the
// map_ended event agents use to drop the job's queued items, a stop or
// best-effort event, and the best-effort metrics.
func (r *jobRunner) afterMapEnd() {
	r.mu.Lock()
	st := r.endSnap // the counts that ended it, before any late result
	kill := r.kill
	r.kill = false // a later round (a replay reopened the job) is not killed
	r.mu.Unlock()
	if kill {
		r.log.Info().Msg("killing the running steps of the job")
	}
	r.c.event(r.id, messages.MapPhaseEndedEvent{State: st.MapState, Reason: st.MapReason, Kill: kill})
	switch st.MapReason {
	case messages.CompletionMaxFailures, messages.CompletionFailureThreshold, messages.CompletionFirstFailure, messages.CompletionItemStop:
		r.log.Warn().Str("reason", st.MapReason).Int64("failed", st.Failed+st.DeadLettered+st.Skipped).Msg("job stopped by its error policy")
		r.c.event(r.id, messages.JobStoppedEvent{
			Reason: st.MapReason, Succeeded: st.Succeeded, Failed: st.Failed,
			DeadLettered: st.DeadLettered, Skipped: st.Skipped, NotRun: st.NotRun,
		})
	}
	if be := st.BestEffort; be != nil {
		ratio := 0.0
		if be.Groups > 0 {
			ratio = float64(be.GroupsCompleted) / float64(be.Groups)
		}
		r.c.metrics.bestEffortRatio.Set(ratio) // first: a reader that saw the count sees the ratio
		r.c.metrics.bestEffort.WithLabelValues(st.MapReason).Inc()
		r.log.Info().Str("reason", st.MapReason).Int("groups_completed", be.GroupsCompleted).Int("min_groups", be.MinGroups).Bool("success", be.Success).Msg("best-effort completion")
		r.c.event(r.id, messages.BestEffortCompletionEvent{
			Reason: st.MapReason, Groups: be.Groups, GroupsCompleted: be.GroupsCompleted,
			MinGroups: be.MinGroups, Success: be.Success, CompletionRatio: ratio,
			NotRun: st.NotRun,
		})
	}
}

// lateResultLocked handles a result for an item counted not_run when the
// map phase ended (it was running then). late_results: update (the default
// for jobs without best_effort) amends the counts; log only counts and
// logs it. It reports whether the result is to be aggregated.
func (r *jobRunner) lateResultLocked(res *messages.Result) bool {
	st := &r.rec.Status
	st.LateResults++
	r.dirty = true
	r.c.metrics.lateResults.WithLabelValues(r.lateMode).Inc()
	mode := r.lateMode
	data := messages.LateResultEvent{ItemID: res.ItemID, Index: res.Index, Outcome: res.Outcome, Policy: mode, Group: res.Group}
	r.deferLocked(func() {
		r.log.Info().Str("item_id", res.ItemID).Str("outcome", res.Outcome).Str("policy", mode).Msg("late result")
		r.c.event(r.id, data)
	})
	if mode == messages.LateResultsLog {
		r.outcome[res.Index] = ocLate
		return false
	}
	if st.BestEffort != nil {
		r.deferLocked(func() {
			r.c.event(r.id, messages.JobResultAmendedEvent(data))
		})
	}
	return true
}

// collectLocked feeds error_collection: immediate emits an event per
// failure, batched one per N failures (the rest when the job ends);
// aggregate only reports. Results replayed at a restart were emitted
// before it.
func (r *jobRunner) collectLocked(res *messages.Result) {
	if r.collector == nil {
		return
	}
	evs := r.collector.Add(retry.ErrorEvent{ItemID: res.ItemID, Class: res.ErrorClass, Message: res.Error, Signature: res.Signature})
	if len(evs) == 0 || !r.life.live {
		return
	}
	if r.workflow.Collection().Mode == messages.CollectImmediate {
		ev := evs[0]
		outcome, reason := res.Outcome, res.Reason
		r.deferLocked(func() {
			r.c.event(r.id, messages.ItemFailedEvent{
				ItemID: ev.ItemID, Class: ev.Class, Message: ev.Message, Signature: ev.Signature,
				Outcome: outcome, Reason: reason,
			})
		})
		return
	}
	r.deferLocked(func() { r.errorBatch(evs) })
}

func (r *jobRunner) errorBatch(evs []retry.ErrorEvent) {
	batch := messages.ErrorBatchEvent{Count: len(evs), Errors: make([]messages.ItemErrorEntry, len(evs))}
	for i, e := range evs {
		batch.Errors[i] = messages.ItemErrorEntry{ItemID: e.ItemID, Class: e.Class, Message: e.Message, Signature: e.Signature}
	}
	r.c.event(r.id, batch)
}

// applyReopen handles the marker a DLQ replay writes before republishing
// an item: the item's earlier outcome stops counting and its next
// generation is awaited. A finished job is reopened for it.
func (r *jobRunner) applyReopen(res *messages.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.rec.Status
	if res.Index < 0 || res.Index >= st.Items || res.Generation <= r.gens[res.Index] {
		return // outside the job, or a duplicate marker
	}
	if prev := r.outcome[res.Index]; prev != ocNone {
		r.count(prev, &messages.Result{Group: res.Group}, -1)
	}
	r.outcome[res.Index] = ocNone
	r.gens[res.Index] = res.Generation
	r.reopened[res.Index] = true
	r.dirty = true
	if r.fireLocked(reopened) { // refused unless the map phase had ended
		st.State, st.CompletionReason, st.FinishedAt = messages.StateRunning, "", nil
		r.deferLocked(func() { r.log.Info().Str("item_id", res.ItemID).Msg("job reopened by a DLQ replay") })
		r.wakeUp()
	}
}
