package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/api"
	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func apiErr(code, msg string) *messages.APIError { return endpoint.Err(code, msg) }

// submitAs is jobs.submit for team (teams.go), or for no team.
func (c *Coordinator) submitAs(ctx context.Context, data []byte, team string) (any, *messages.APIError) {
	if len(data) > c.cfg.MaxSpecBytes {
		return nil, apiErr(messages.CodeTooLarge, tooLargeSpec(len(data), c.cfg.MaxSpecBytes))
	}
	spec, problems := c.admitSpec(data)
	if len(problems) > 0 {
		return nil, invalidSpec(problems)
	}
	if spec.Team != "" && spec.Team != team {
		// A job's team is the subject it came through, never its spec's word.
		return nil, invalidSpec([]messages.FieldError{{Field: "team", Message: "set by the coordinator from the team's API subject (fleetctl --team): leave it out"}})
	}
	spec.Team = team
	if fe := c.teamProblem(jobspec.WithDefaults(spec)); fe != nil {
		return nil, invalidSpec([]messages.FieldError{*fe})
	}
	if problems := c.checkInput(spec); len(problems) > 0 {
		return nil, &messages.APIError{Code: messages.CodeInvalid, Field: problems[0].Field,
			Message: problems[0].Field + ": " + problems[0].Message, Problems: problems}
	}
	if problems := c.handlerProblems(ctx, spec); len(problems) > 0 {
		return nil, invalidSpec(problems)
	}
	if fe, err := c.pools.Check(ctx, jobspec.WithDefaults(spec).Pool); err != nil {
		if e := c.fullRefusal(err); e != nil {
			return nil, e
		}
		return nil, apiErr(messages.CodeInternal, err.Error())
	} else if fe != nil {
		return nil, invalidSpec([]messages.FieldError{*fe})
	}
	if spec.ID == "" {
		spec.ID = "job-" + strings.ToLower(nuid.Next())
	}
	// A rejected job's id is free: the corrected spec replaces the record.
	var after uint64
	if rec, rev, err := c.store.getRev(ctx, spec.ID); err == nil {
		if rec.Status.State != messages.StateRejected && team != "" && (rec.Spec == nil || rec.Spec.Team != team) {
			// Another team's job: its state is not this team's to see.
			return nil, &messages.APIError{Code: messages.CodeConflict, Field: "id", Message: fmt.Sprintf("the job id %q is taken: choose another", spec.ID)}
		}
		if rec.Status.State != messages.StateRejected {
			return messages.SubmitReply{JobID: spec.ID, Existing: true, State: rec.Status.State}, nil
		}
		after = rev
	} else if !errors.Is(err, errNoJob) {
		if e := c.fullRefusal(err); e != nil {
			return nil, e
		}
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	if why := c.openJobsFull(); why != "" {
		return nil, apiErr(messages.CodeTooMany, why)
	}
	if spec.Input == "" && spec.InputCommand == "" {
		// Inline items are at hand: refuse bad ones with this request rather
		// than as a rejected job (the intake checks them again).
		_, _, problems, err := c.countItems(ctx, jobspec.WithDefaults(spec))
		if err != nil {
			return nil, apiErr(messages.CodeInternal, err.Error())
		}
		if len(problems) > 0 {
			return nil, invalidSpec(problems)
		}
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	ctx, span := c.traceAPISubmit(ctx, spec.ID)
	defer span.End()
	ack, err := c.js.PublishMsg(ctx, c.submissionMsg(ctx, body), jetstream.WithMsgID(submissionID(spec.ID, body, after)))
	c.submitFull.Observe(err)
	if e := c.fullRefusal(err); e != nil {
		return nil, e
	}
	if err != nil {
		// Unavailable when this coordinator's server is cut off the
		// cluster: Client.Submit sends it again (the same id: one job).
		return nil, api.UnavailableOr(fmt.Errorf("storing the submission: %w", err))
	}
	state := messages.StatePending
	if ack.Duplicate {
		if rec, err := c.store.get(ctx, spec.ID); err == nil {
			state = rec.Status.State
		}
	}
	return messages.SubmitReply{JobID: spec.ID, Existing: ack.Duplicate, State: state}, nil
}

// fullRefusal is the API error of a submission whose read or write failed
// for want of room, or nil: refused by JetStream (natsconn.StoreFull), or
// unanswered after such a refusal of this coordinator's writes
// (storeFullErr: the stream has had no leader since, as no node without
// room stands for election). Either way nothing was stored, and the
// submitter is told why, not a bare "unavailable" (docs/deploy.md, "A full
// store").
func (c *Coordinator) fullRefusal(err error) *messages.APIError {
	if natsconn.StoreFull(err) {
		c.metrics.storeFull.Set(1)
		return apiErr(messages.CodeStoreFull, fmt.Sprintf("store full: the submission was not stored: %v", err))
	}
	if full := c.storeFullErr(); full != nil && natsconn.ClusterLoss(err) {
		c.metrics.storeFull.Set(1)
		return apiErr(messages.CodeStoreFull, fmt.Sprintf(
			"store full: the submission was not stored: JetStream refused a write for want of room (%v) and has stored none since (%v); submit it again once there is room (the same id makes one job)", full, err))
	}
	return nil
}

// noteStoreFull sets the store-full gauge from the lease's last write (a
// full store refuses it as it refuses every write) and the intake's last
// answer to a submission.
func (c *Coordinator) noteStoreFull() {
	full := 0.0
	if c.storeFullErr() != nil {
		full = 1
	}
	c.metrics.storeFull.Set(full)
}

// storeFullErr returns JetStream's refusal of a write for want of room,
// when the lease's writes or the submissions' have had nothing since but
// unanswered writes (natsconn.FullStore), or nil.
func (c *Coordinator) storeFullErr() error {
	if c.lease != nil {
		if err := c.lease.WriteErr(); natsconn.StoreFull(err) {
			return err
		}
		// A lease write stored since a submission's refusal: room again.
		c.submitFull.ForgetBefore(c.lease.Stored())
	}
	return c.submitFull.Err()
}

// apiStatusHere is jobs.status answered by this coordinator, never
// forwarded: by the leader only, while its lease is current (a leader that
// has not renewed it may have a successor whose counts moved on).
func (c *Coordinator) apiStatusHere(ctx context.Context, data []byte) (any, *messages.APIError) {
	req, e := api.DecodeJobRequest(data)
	if e != nil {
		return nil, e
	}
	if c.lease == nil || !c.lease.Current() {
		return nil, apiErr(messages.CodeUnavailable, "jobs.status: this coordinator does not lead now")
	}
	if r := c.runner(req.JobID); r != nil && !r.replayed() {
		// A new leader's runner still counting the job's results again: its
		// counts are partial, and the record may be up to a status interval
		// behind what the previous leader's runner answered.
		return nil, apiErr(messages.CodeUnavailable, "jobs.status: the job's runner is catching up with its results")
	}
	st, err := c.Status(ctx, req.JobID)
	if errors.Is(err, errNoJob) {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", req.JobID)}
	}
	if err != nil {
		return nil, api.UnavailableOr(err)
	}
	if st.Source == messages.StatusFromRecord && !messages.TerminalState(st.State) && st.Phase != messages.PhaseSetup {
		// (A job in its setup phase has no runner: its record, which its
		// setup runner writes, is its status; setup.go.)
		// An open job without a runner here yet (a new term, resuming its
		// jobs): the record may be behind what the previous leader's runner
		// answered, by as long as its writes failed (a fault).
		return nil, apiErr(messages.CodeUnavailable, "jobs.status: the job's runner is catching up with its results")
	}
	return messages.StatusReply{Status: c.withUnreachable(st)}, nil
}

// withUnreachable returns st, while the job is not finished, with the
// agents of its pool the hub has not heard from lately (a site whose
// leaf link is down): a copy, st may be shared.
func (c *Coordinator) withUnreachable(st *messages.JobStatus) *messages.JobStatus {
	if st == nil || st.FinishedAt != nil || c.agents == nil {
		return st
	}
	// The wall clock: presences carry the server's time of their write.
	gone := c.agents.unreachable(st.Pool, time.Now())
	if len(gone) == 0 {
		return st
	}
	out := *st
	out.Unreachable = gone
	return &out
}
