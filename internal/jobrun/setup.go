package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The setup phase (docs/job-spec.md, "The setup phase"). A job with
// Prodigy's setup steps or a map.input command is accepted without its
// items: its record says phase setup, and the coordinator publishes one
// setup item to the job's pool (it never runs a submitter's command
// itself). The agent that runs it carries back, in the item's result, the
// text of the file the setup left at the job's input (or the input
// command's items); the coordinator stores that text in the inputs bucket
// as the job's input, counts the items from it as it counts any input, and
// only then creates the job's budgets and starts its runner. What the
// setup's steps captured comes back in the same result; the coordinator
// keeps it in the job's record and its spec records (SetupCaptures),
// written before any map item is published, and every map and reduce item
// starts with it. A setup that fails fails the job, with the step's output
// and error in its status.
//
// The setup item is durable like any other: a coordinator that takes over
// (or restarts) finds the job's record in phase setup, publishes the item
// again under the same message id (a no-op within the work stream's
// duplicates window) and reads the job's results from the start for the
// setup's outcome, which an agent may have reported while no coordinator
// led.

// needsSetup reports whether a job runs a setup item before its map phase.
func needsSetup(s *messages.JobSpec) bool { return s.Setup != nil || s.InputCommand != "" }

// setupLeavesInput reports whether the job's items come from its setup
// item: an input command, or setup steps that write the file its input
// names (neither an upload nor a file of the coordinator's).
func setupLeavesInput(s *messages.JobSpec) bool {
	return s.InputCommand != "" || s.Setup != nil && s.Input != "" && !strings.Contains(s.Input, "://")
}

// setupBackoff spaces the tries of the setup runner's writes: 250ms
// doubling to 5s.
var setupBackoff = retry.Exponential(250*time.Millisecond, 5*time.Second)

// acceptSetup accepts a durable submission whose job has a setup phase:
// its record in phase setup, no items yet (itemsAccepted follows the
// setup). rev is the revision of the rejected record it replaces (0:
// none).
func (c *Coordinator) acceptSetup(ctx context.Context, seq uint64, spec, eff *messages.JobSpec, rev uint64, now time.Time) error {
	if !setupLeavesInput(eff) {
		if problems := c.checkInput(eff); len(problems) > 0 {
			return c.reject(ctx, seq, spec.ID, problems, now)
		}
	}
	if problems := c.handlerProblems(ctx, eff); len(problems) > 0 {
		return c.reject(ctx, seq, spec.ID, problems, now)
	}
	if !setupLeavesInput(eff) {
		if problems, err := c.adoptInput(ctx, eff); err != nil {
			return fmt.Errorf("input of %s: %w", spec.ID, err)
		} else if len(problems) > 0 {
			return c.reject(ctx, seq, spec.ID, problems, now)
		}
	}
	if err := c.ensurePools(ctx, eff.Pool, nil); err != nil {
		return err
	}
	// The best-effort defaults are the operator's of now.
	c.cfg.BestEffort.Apply(spec.BestEffort, eff.BestEffort)
	rec := wire.JobRecord{
		Spec: eff,
		Status: messages.JobStatus{
			ID: spec.ID, Name: eff.Name, Pool: eff.Pool, State: messages.StatePending,
			Phase: messages.PhaseSetup, SubmittedAt: now, Setup: &messages.SetupStatus{State: "pending"},
		},
		SubmitSeq: seq,
	}
	holdAtAcceptance(&rec, now) // not_before holds the setup too (notbefore.go)
	nrev, _, err := c.store.update(ctx, &rec, rev)
	if err != nil {
		return err
	}
	if nrev == 0 {
		return nil
	}
	if spec.Input != eff.Input {
		c.dropUpload(ctx, spec.Input) // the job reads its own copy
	}
	c.metrics.jobsAccepted.Inc()
	c.log.Info().Str("job_id", spec.ID).Bool("replaces_rejected", rev != 0).Msg("job accepted; its setup runs first")
	c.event(spec.ID, messages.JobSubmittedEvent{Pool: eff.Pool})
	c.startRunner(rec, nrev)
	return nil
}

// startSetup starts the setup runner of a job in phase setup, if this
// coordinator leads and runs none for it. Called by startRunner.
func (c *Coordinator) startSetup(rec wire.JobRecord, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx := c.runCtx
	if ctx == nil || ctx.Err() != nil {
		return
	}
	if c.setups == nil {
		c.setups = map[string]context.CancelFunc{}
	}
	id := rec.Status.ID
	if c.setups[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	c.setups[id] = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		next, nrev, ok := c.runSetup(ctx, rec, rev)
		c.mu.Lock()
		delete(c.setups, id)
		c.mu.Unlock()
		if ok && !messages.TerminalState(next.Status.State) {
			c.startRunner(next, nrev)
		}
	}()
}

// runSetup runs a job's setup phase to its end: it publishes the setup
// item, waits for its result and completes the job's record from it (the
// items counted, or the job failed). It returns the record and its
// revision, ok false when ctx ended first.
func (c *Coordinator) runSetup(ctx context.Context, rec wire.JobRecord, rev uint64) (wire.JobRecord, uint64, bool) {
	log := c.log.With().Str("job_id", rec.Status.ID).Logger()
	if rec.Status.State == messages.StateScheduled {
		if err := c.waitNotBefore(ctx, rec.Spec.NotBefore); err != nil {
			return rec, rev, false
		}
	}
	bo := retry.NewBackoff(setupBackoff, nil, nil)
	for {
		var err error
		if rec, rev, err = c.publishSetup(ctx, rec, rev); err == nil {
			break
		}
		if ctx.Err() != nil {
			return rec, rev, false
		}
		delay := bo.Next()
		log.Warn().Err(err).Dur("delay", delay).Msg("publishing the setup item failed; retrying")
		if retry.Sleep(ctx, nil, delay) != nil {
			return rec, rev, false
		}
	}
	var res *messages.Result
	for res == nil {
		var err error
		if res, err = c.setupResult(ctx, rec); err != nil {
			if ctx.Err() != nil {
				return rec, rev, false
			}
			delay := bo.Next()
			log.Warn().Err(err).Dur("delay", delay).Msg("reading the setup's result failed; retrying")
			if retry.Sleep(ctx, nil, delay) != nil {
				return rec, rev, false
			}
		}
	}
	bo = retry.NewBackoff(setupBackoff, nil, nil)
	for {
		next, nrev, err := c.finishSetup(ctx, rec, rev, res)
		if err == nil {
			return next, nrev, nrev != 0
		}
		if ctx.Err() != nil {
			return rec, rev, false
		}
		delay := bo.Next()
		log.Warn().Err(err).Dur("delay", delay).Msg("completing the job after its setup failed; retrying")
		if retry.Sleep(ctx, nil, delay) != nil {
			return rec, rev, false
		}
		// Read again: the record may have changed (a write of ours that
		// failed after it was stored).
		if cur, crev, err := c.store.getRev(ctx, rec.Status.ID); err == nil {
			if cur.Status.Phase != messages.PhaseSetup {
				return *cur, crev, !messages.TerminalState(cur.Status.State)
			}
			rec, rev = *cur, crev
		}
	}
}

// waitNotBefore waits until notBefore (RFC 3339, as holdAtAcceptance
// wrote it) on the coordinator's clock, or ctx ends.
func (c *Coordinator) waitNotBefore(ctx context.Context, notBefore string) error {
	at, err := time.Parse(time.RFC3339Nano, notBefore)
	if err != nil {
		return nil // not a time: now
	}
	for {
		left := at.Sub(c.cfg.hooks.Clock.Now())
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(min(left, time.Second)) // the clock may be moved
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// publishSetup publishes the job's setup item (again: the message id makes
// it a no-op within the duplicates window) and marks the job running.
func (c *Coordinator) publishSetup(ctx context.Context, rec wire.JobRecord, rev uint64) (wire.JobRecord, uint64, error) {
	spec := rec.Spec
	id := rec.Status.ID
	wi := wire.WorkItem{
		JobID: id, ItemID: messages.SetupItemID, Index: -1, Payload: json.RawMessage(`{}`),
		CorrelationID: id + ":setup", Phase: messages.PhaseSetup,
	}
	if sign := c.signer(); sign != nil {
		if err := sign(spec.Pool, &wi); err != nil {
			return rec, rev, err
		}
	}
	body, err := json.Marshal(&wi)
	if err != nil {
		return rec, rev, err
	}
	// The setup's agent reads the job's steps from the pool's specs bucket
	// (specs.go); the record is written again, with the items and budget,
	// when the map phase starts.
	if err := c.writeSpecs(ctx, &rec); err != nil {
		return rec, rev, err
	}
	m := nats.NewMsg(c.names.WorkSubject(spec.Pool, id))
	m.Data = body
	m.Header.Set(messages.HeaderMsgID, wire.WorkMsgID(id, messages.SetupItemID, 0))
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return rec, rev, fmt.Errorf("publishing the setup item: %w", err)
	}
	if rec.Status.State != messages.StatePending && rec.Status.State != messages.StateScheduled {
		return rec, rev, nil
	}
	now := c.cfg.hooks.Clock.Now()
	rec.Status.State, rec.Status.StartedAt = messages.StateRunning, &now
	nrev, ok, err := c.store.update(ctx, &rec, rev)
	switch {
	case err != nil:
		return rec, rev, err
	case !ok:
		cur, crev, err := c.store.getRev(ctx, id)
		if err != nil {
			return rec, rev, err
		}
		return *cur, crev, nil
	}
	c.log.Info().Str("job_id", id).Str("pool", spec.Pool).Msg("setup item published")
	c.event(id, messages.JobStartedEvent{})
	return rec, nrev, nil
}

// setupResult reads the job's results from the start until the setup
// item's, from the job's pool; it blocks until one comes or ctx ends.
//
// Its ordered consumer has one replica, on a server of the stream's picked
// at random, and one on a node that applies nothing (its store full) would
// never deliver the setup's result while saying nothing is pending. So
// when nothing comes for setupIdle while the stream's leader holds one of
// the job's results past the last one read, the read fails, and runSetup
// reads again with a new consumer (as reduce.go's read of the results
// does).
func (c *Coordinator) setupResult(ctx context.Context, rec wire.JobRecord) (*messages.Result, error) {
	stream, err := c.js.Stream(ctx, c.names.ResultsStream())
	if err != nil {
		return nil, err
	}
	if c.replica != nil {
		stream = c.replica(stream)
	}
	subj := c.names.JobResultsFilter(rec.Status.ID)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj}, InactiveThreshold: resultsInactive,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	it, err := cons.Messages(jetstream.PullMaxBytes(natsconn.PullBytes))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	pool := rec.Spec.Pool
	var decoded []messages.Result
	var seen uint64 // the stream sequence of the last message read
	for {
		wctx, cancel := context.WithTimeout(ctx, setupIdle)
		m, err := it.Next(jetstream.NextContext(wctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			more, err := kvleader.StoredAfter(ctx, c.js, c.names.ResultsStream(), subj, seen, math.MaxUint64)
			if err != nil {
				return nil, err
			}
			if more {
				return nil, fmt.Errorf("reading the setup's result: nothing after stream sequence %d for %s, while the stream's leader holds more", seen, setupIdle)
			}
			continue // the setup runs
		}
		if md, err := m.Metadata(); err == nil {
			seen = md.Sequence.Stream
		}
		origin := wire.Origin(c.names, m.Subject())
		decoded, _ = wire.DecodeResults(m.Data(), decoded)
		for i := range decoded {
			res := &decoded[i]
			if res.Phase != messages.PhaseSetup || res.JobID != rec.Status.ID {
				continue
			}
			if origin != pool {
				c.log.Warn().Str("job_id", rec.Status.ID).Str("origin", origin).Msg("setup result refused: it did not come from the job's pool")
				continue
			}
			out := *res
			return &out, nil
		}
	}
}

// setupIdle is how long setupResult waits for the next of the job's
// results before it asks the stream's leader whether it holds one its
// consumer has not delivered. A variable for tests.
var setupIdle = 10 * time.Second

// finishSetup completes the record of a job whose setup item reported
// res: on success the setup's input is stored and the items counted (the
// job is accepted as any other, in phase map); otherwise, or when the
// items cannot be accepted, the job fails with the reason. It returns the
// record written and its revision; a revision of 0 means the record
// changed under it (another leader's runner took it on).
func (c *Coordinator) finishSetup(ctx context.Context, rec wire.JobRecord, rev uint64, res *messages.Result) (wire.JobRecord, uint64, error) {
	id := rec.Status.ID
	eff := rec.Spec
	st := &messages.SetupStatus{State: res.Outcome, Output: wire.Clip(res.Output, maxErrorMessage), Error: res.Error, Agent: res.Agent}
	if res.Outcome != messages.OutcomeSucceeded {
		st.State = messages.OutcomeFailed
		if res.Reason != messages.ReasonSetupInput { // its steps succeeded
			st.Step = setupStep(eff, res)
		}
		return c.failSetup(ctx, rec, rev, st, nil)
	}
	if setupLeavesInput(eff) {
		items := ""
		if res.Setup != nil {
			items = res.Setup.Items
		}
		st.InputBytes = len(items)
		ref, digest, err := c.storeSetupInput(ctx, id, items)
		if err != nil {
			return rec, rev, err
		}
		eff.Input, eff.InputDigest, eff.InputCommand = ref, digest, ""
	}
	if res.Setup != nil && len(res.Setup.Captures) > 0 {
		caps, problem := setupCaptures(res.Setup.Captures)
		if problem != "" {
			st.State, st.Error = messages.OutcomeFailed, problem
			return c.failSetup(ctx, rec, rev, st, nil)
		}
		// Kept in the job's record and, by the runner's first writeSpecs,
		// in its spec records, before any map item is published.
		rec.SetupCaptures = caps
	}
	total, groups, problems, err := c.countItems(ctx, eff)
	if err != nil {
		return rec, rev, err
	}
	if len(problems) > 0 {
		st.State = messages.OutcomeFailed
		return c.failSetup(ctx, rec, rev, st, problems)
	}
	rec.Status.Items = total
	rec.Status.Setup = st
	rec.Status.Phase = messages.PhaseMap
	if problems, err := c.itemsAccepted(ctx, nil, &rec, total, groups, c.cfg.hooks.Clock.Now()); err != nil {
		return rec, rev, err
	} else if len(problems) > 0 {
		st.State = messages.OutcomeFailed
		return c.failSetup(ctx, rec, rev, st, problems)
	}
	nrev, _, err := c.store.update(ctx, &rec, rev)
	if err != nil {
		return rec, rev, err
	}
	c.log.Info().Str("job_id", id).Int64("items", total).Int("input_bytes", st.InputBytes).Msg("setup succeeded; the map phase starts")
	return rec, nrev, nil
}

// setupCaptures reads the captures a setup result carries, or says why
// they cannot be kept: not an object of captures, or over the bound of an
// item's captures (the agent enforces it; a result is checked anyway, as
// the coordinator stores it and every item of the job reads it).
func setupCaptures(raw json.RawMessage) (map[string]*wire.Capture, string) {
	var caps map[string]*wire.Capture
	if err := json.Unmarshal(raw, &caps); err != nil {
		return nil, "the setup's captures do not read: " + err.Error()
	}
	total := 0
	for name, c := range caps {
		if c == nil {
			delete(caps, name)
			continue
		}
		total += c.Size()
	}
	if total > wire.MaxCaptureBytes {
		return nil, fmt.Sprintf("the setup's captures are %d bytes, over the bound of %d bytes", total, wire.MaxCaptureBytes)
	}
	return caps, ""
}

// storeSetupInput writes the input a setup left to the inputs bucket, which
// only coordinators write, and returns its reference and digest.
func (c *Coordinator) storeSetupInput(ctx context.Context, id, items string) (ref, digest string, err error) {
	obs, err := c.js.ObjectStore(ctx, c.names.InputsBucket())
	if err != nil {
		return "", "", fmt.Errorf("object store: %w", err)
	}
	name := "input/" + id + "/setup-items.json"
	info, err := obs.PutString(ctx, name, items)
	if err != nil {
		return "", "", fmt.Errorf("writing %s: %w", name, err)
	}
	return expand.ObjectStoreScheme + c.names.InputsBucket() + "/" + name, info.Digest, nil
}

// failSetup ends a job whose setup failed, or whose items the setup left
// cannot be accepted (problems): failed, with no items, the setup's
// outcome and the reason in its status.
func (c *Coordinator) failSetup(ctx context.Context, rec wire.JobRecord, rev uint64, st *messages.SetupStatus, problems []messages.FieldError) (wire.JobRecord, uint64, error) {
	now := c.cfg.hooks.Clock.Now()
	s := &rec.Status
	reason := "setup_failed"
	switch {
	case len(problems) > 0:
		reason += ": the items the setup left: " + problems[0].Error()
	case st.Step != "":
		reason += ": step " + st.Step + ": " + wire.Clip(st.Error, maxErrorMessage)
	case st.Error != "":
		reason += ": " + wire.Clip(st.Error, maxErrorMessage)
	}
	s.State, s.CompletionReason, s.Phase, s.FinishedAt = messages.StateFailed, reason, messages.PhaseDone, &now
	s.Setup, s.Problems = st, boundProblems(problems)
	nrev, _, err := c.store.update(ctx, &rec, rev)
	if err != nil {
		return rec, rev, err
	}
	if nrev != 0 {
		c.log.Warn().Str("job_id", s.ID).Str("reason", reason).Msg("setup failed; the job fails")
		c.event(s.ID, messages.JobCompletedEvent(*s))
		c.metrics.jobsFinished.WithLabelValues(s.State).Inc()
	}
	return rec, nrev, nil
}

// setupStep names the setup step a failed result stopped at: the step of
// its last attempt, or "" when it says none.
func setupStep(spec *messages.JobSpec, res *messages.Result) string {
	var steps []messages.Step
	if spec.Setup != nil {
		steps = spec.Setup.Commands
	}
	i := -1
	for _, s := range res.Steps {
		i = max(i, s.Step)
	}
	switch {
	case i < 0 && len(steps)+boolCount(spec.InputCommand != "") == 1:
		i = 0
	case i < 0:
		return ""
	}
	if i < len(steps) {
		if n := steps[i].Name; n != "" {
			return fmt.Sprintf("%d (%s)", i+1, n)
		}
		return fmt.Sprintf("%d", i+1)
	}
	return "input_command"
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setupCancel cancels a job in its setup phase whose setup runner runs
// here: its record is written cancelled (the runner's own writes then
// conflict and it stops), the setup item is purged if still queued, and a
// map_ended event tells the agents, killing the running setup with kill.
// handled is false when the job is not in its setup phase here: the
// caller cancels it as any other.
func (c *Coordinator) setupCancel(ctx context.Context, id string, kill bool) (st *messages.JobStatus, handled bool, err error) {
	c.mu.Lock()
	stop := c.setups[id]
	c.mu.Unlock()
	if stop == nil {
		return nil, false, nil
	}
	for {
		rec, rev, err := c.store.getRev(ctx, id)
		if err != nil {
			return nil, true, err
		}
		if rec.Status.Phase != messages.PhaseSetup || messages.TerminalState(rec.Status.State) {
			return nil, false, nil // the setup ended meanwhile
		}
		now := c.cfg.hooks.Clock.Now()
		s := &rec.Status
		s.State, s.CompletionReason, s.MapState, s.MapReason = messages.StateCancelled, messages.CompletionCancelled, messages.StateCancelled, messages.CompletionCancelled
		s.Phase, s.FinishedAt = messages.PhaseDone, &now
		if s.Setup == nil {
			s.Setup = &messages.SetupStatus{}
		}
		s.Setup.State = messages.StateCancelled
		nrev, _, err := c.store.update(ctx, rec, rev)
		if err != nil {
			return nil, true, err
		}
		if nrev == 0 {
			continue // the setup runner wrote: read again
		}
		stop()
		if err := c.purgeSubject(ctx, c.names.WorkStream(), c.names.WorkSubject("*", id)); err != nil {
			c.log.Warn().Err(err).Str("job_id", id).Msg("purging the queued setup item failed; agents skip it")
		}
		c.log.Info().Str("job_id", id).Bool("kill", kill).Msg("job cancelled during its setup")
		c.event(id, messages.MapPhaseEndedEvent{State: s.State, Reason: s.CompletionReason, Kill: kill})
		c.event(id, messages.JobCompletedEvent(*s))
		c.metrics.jobsFinished.WithLabelValues(s.State).Inc()
		return s, true, nil
	}
}
