package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// serveAPI registers the jetfleet micro service, each endpoint's handler
// made by wrap (apiServer.handler).
func (c *Coordinator) serveAPI(wrap func(name string, fn endpointFunc) micro.Handler) (micro.Service, error) {
	build := version.Get()
	svc, err := micro.AddService(c.nc, micro.Config{
		Name:        messages.ServiceName,
		Version:     build.Semver(),
		Description: "jetfleet coordinator API",
		// fleetctl version reads the build and tells fleets apart.
		Metadata: map[string]string{"prefix": c.cfg.Prefix, "build": build.String(), "go": build.Go},
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: micro service: %w", err)
	}
	g := svc.AddGroup(c.cfg.Prefix + ".api")
	endpoints := map[string]endpointFunc{
		messages.EndpointJobsSubmit: c.apiSubmit,
		messages.EndpointJobsStatus: c.apiStatus,
		messages.EndpointJobsList:   c.apiList,
		messages.EndpointJobsCancel: c.apiCancel,
		messages.EndpointJobsPrune:  c.apiPrune,
	}
	for name, fn := range c.extraEndpoints() {
		endpoints[name] = fn
	}
	for name, fn := range endpoints {
		if err := g.AddEndpoint(strings.ReplaceAll(name, ".", "_"), wrap(name, fn), micro.WithEndpointSubject(name)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("coordinator: endpoint %s: %w", name, err)
		}
	}
	if err := c.serveTeams(g, wrap); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}

// safeCall runs an endpoint; a panic (a bug a request found) answers that
// request with an internal error instead of ending the coordinator.
func (c *Coordinator) safeCall(ctx context.Context, name string, fn func(context.Context, []byte) (any, *messages.APIError), data []byte) (reply any, e *messages.APIError) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error().Str("endpoint", name).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("API request panicked; answered with an internal error")
			reply, e = nil, apiErr(messages.CodeInternal, fmt.Sprintf("internal error: %v", p))
		}
	}()
	return fn(ctx, data)
}

// extraEndpoints lets other files (the DLQ API, schedules, pause) add endpoints.
func (c *Coordinator) extraEndpoints() map[string]endpointFunc {
	m := c.dlqEndpoints()
	for name, fn := range c.schedules.Endpoints() {
		m[name] = fn
	}
	for name, fn := range c.pauseEndpoints() {
		m[name] = fn
	}
	for name, fn := range c.testEndpoints {
		m[name] = fn
	}
	return m
}

func httpish(code string) string {
	switch code {
	case messages.CodeBadRequest, messages.CodeInvalid:
		return "400"
	case messages.CodeNotFound:
		return "404"
	case messages.CodeConflict:
		return "409"
	case messages.CodeTooLarge:
		return "413"
	case messages.CodeTooMany:
		return "429"
	}
	return "500"
}

func apiErr(code, msg string) *messages.APIError { return endpoint.Err(code, msg) }

func badJSON(err error) *messages.APIError {
	return apiErr(messages.CodeBadRequest, "request is not valid JSON: "+err.Error())
}

// decodeRequest decodes a JSON request strictly; an empty body is allowed
// when the request has no required field.
func decodeRequest(data []byte, v any) *messages.APIError { return endpoint.Decode(data, v) }

func (c *Coordinator) apiSubmit(ctx context.Context, data []byte) (any, *messages.APIError) {
	return c.submitAs(ctx, data, "")
}

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
	if fe, err := c.pools.check(ctx, jobspec.WithDefaults(spec).Pool); err != nil {
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
		return nil, unavailableOr(fmt.Errorf("storing the submission: %w", err))
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

// jobIDProblem checks a request's job_id: required, and a valid job id
// (anything else names no job, and must not reach the server as a key).
func jobIDProblem(id string) *messages.APIError {
	if id == "" {
		return &messages.APIError{Code: messages.CodeBadRequest, Field: "job_id", Message: "required"}
	}
	if err := messages.ValidToken(id); err != nil {
		return &messages.APIError{Code: messages.CodeBadRequest, Field: "job_id", Message: "not a job id: " + err.Error()}
	}
	return nil
}

// decodeJobRequest decodes a request that names one job.
func decodeJobRequest(data []byte) (messages.JobRequest, *messages.APIError) {
	var req messages.JobRequest
	if e := decodeRequest(data, &req); e != nil {
		return req, e
	}
	return req, jobIDProblem(req.JobID)
}

func (c *Coordinator) apiStatus(ctx context.Context, data []byte) (any, *messages.APIError) {
	if _, e := decodeJobRequest(data); e != nil {
		return nil, e
	}
	if !c.IsLeader() {
		// Only the leader answers (docs/design.md, "Status never goes
		// back"): its runner has the live counts, and its lease puts it on
		// the side of the cluster that takes writes. A follower that
		// answered from the record (up to StatusInterval behind, and a
		// whole fault behind when it comes from a cut-off node's copy)
		// would make counts go back between two requests that two
		// coordinators answer. With the leader out of reach, the client is
		// told unavailable and asks again, elsewhere.
		if reply, e, ok := c.askLeaderStatus(ctx, data); ok {
			return reply, e
		}
		if c.lease != nil && natsconn.StoreFull(c.lease.WriteErr()) {
			// Why no coordinator leads, and so why the job does not move;
			// the gauge says so too, before the next health check.
			c.metrics.storeFull.Set(1)
			return nil, apiErr(messages.CodeStoreFull, fmt.Sprintf(
				"store full: no coordinator can lead, the lease cannot be written (%v); the jobs resume once there is room", c.lease.WriteErr()))
		}
		return nil, apiErr(messages.CodeUnavailable, "jobs.status: the leading coordinator does not answer")
	}
	return c.apiStatusHere(ctx, data)
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

// unavailableOr is the API error of a failed read or write: "unavailable" when
// it failed as calls through a server cut off the cluster do, or while
// JetStream elects a leader (natsconn.ClusterLoss), so that the client asks
// again (another coordinator, or this one a moment later, can answer);
// "internal" otherwise. A request cut short because this coordinator's
// leadership term ended, or it stops, is "unavailable" too.
func unavailableOr(err error) *messages.APIError {
	if natsconn.ClusterLoss(err) || errors.Is(err, context.Canceled) {
		// Canceled: this coordinator's term ended (or it stops) during the
		// request; another may answer it.
		return apiErr(messages.CodeUnavailable, err.Error())
	}
	return apiErr(messages.CodeInternal, err.Error())
}

// apiStatusHere is jobs.status answered by this coordinator, never
// forwarded: by the leader only, while its lease is current (a leader that
// has not renewed it may have a successor whose counts moved on).
func (c *Coordinator) apiStatusHere(ctx context.Context, data []byte) (any, *messages.APIError) {
	req, e := decodeJobRequest(data)
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
		return nil, unavailableOr(err)
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

func (c *Coordinator) apiList(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.ListRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.Limit < 0 || req.Limit > MaxListLimit {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "limit", Message: fmt.Sprintf("%d, want 0 (default %d) to %d", req.Limit, DefaultListLimit, MaxListLimit)}
	}
	wctx, cancel := context.WithTimeout(ctx, indexWait)
	err := c.index.wait(wctx)
	cancel()
	if err != nil {
		return nil, apiErr(messages.CodeInternal, "the job index is still loading: "+err.Error())
	}
	reply, err := c.index.list(req)
	if errors.Is(err, errBadCursor) {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "cursor", Message: err.Error()}
	}
	if err != nil {
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	return reply, nil
}

func (c *Coordinator) apiCancel(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.CancelRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if e := jobIDProblem(req.JobID); e != nil {
		return nil, e
	}
	var opts []CancelOption
	if req.Kill {
		opts = append(opts, client.WithKill())
	}
	st, err := c.JobCancel(ctx, req.JobID, opts...)
	if errors.Is(err, errNoJob) && c.accepted(ctx, req.JobID) {
		st, err = c.JobCancel(ctx, req.JobID, opts...)
	}
	switch {
	case errors.Is(err, errNoJob):
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", req.JobID)}
	case errors.Is(err, errJobFinished):
		return nil, &messages.APIError{Code: messages.CodeConflict, Field: "job_id", Message: fmt.Sprintf("job %q already ended (%s)", req.JobID, st.State)}
	case err != nil:
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	return messages.StatusReply{Status: st}, nil
}

func (c *Coordinator) apiPrune(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.PruneRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	r, err := c.JobPrune(ctx, req)
	var ae *messages.APIError
	switch {
	case errors.As(err, &ae):
		return nil, ae
	case err != nil:
		return nil, apiErr(messages.CodeInternal, err.Error())
	}
	return *r, nil
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
