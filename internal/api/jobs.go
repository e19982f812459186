package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Jobs is the face of the coordinator's jobs the API takes
// (internal/jobrun gives it): what the jobs.* and pools.* endpoints ask
// of them, once a request is decoded and checked. Errors that name no
// job, a finished job, a job past its map phase or a bad cursor are
// marked with this package's sentinels (errors.Is); their text is the
// message of the error reply where one is shown.
type Jobs interface {
	// Submit is jobs.submit of spec for team ("" for none): the
	// submission is admitted and stored, or refused with why.
	Submit(ctx context.Context, spec []byte, team string) (any, *messages.APIError)
	// IsLeader reports whether this coordinator leads; StatusHere is
	// jobs.status answered by the leader (data is the request);
	// NoLeader is why no coordinator can lead when the store is full,
	// or nil.
	IsLeader() bool
	StatusHere(ctx context.Context, data []byte) (any, *messages.APIError)
	NoLeader() *messages.APIError
	// List is jobs.list of the job index, once loaded.
	List(ctx context.Context, req messages.ListRequest) (messages.ListReply, error)
	// Cancel, Pause and Resume change a job's state; PoolPause and
	// PoolResume a pool's.
	Cancel(ctx context.Context, id string, kill bool) (*messages.JobStatus, error)
	Pause(ctx context.Context, id string) (*messages.JobStatus, error)
	Resume(ctx context.Context, id string) (*messages.JobStatus, error)
	PoolPause(ctx context.Context, pool string) (*messages.PoolPauseReply, error)
	PoolResume(ctx context.Context, pool string) (*messages.PoolPauseReply, error)
	// Prune is jobs.prune.
	Prune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error)
	// Accepted reports whether job id has a record, waiting while the
	// intake holds submissions (a cancel right after its submit).
	Accepted(ctx context.Context, id string) bool
	// Teams returns the teams job id is of: its status's and its spec's
	// (either may be ""), read from the stream leader.
	Teams(ctx context.Context, id string) (status, spec string, err error)
}

// Sentinels of the Jobs interface's errors.
var (
	ErrNoJob       = errors.New("api: no such job")
	ErrJobFinished = errors.New("api: job already finished")
	ErrMapEnded    = errors.New("api: the job's map phase ended")
	ErrBadCursor   = errors.New("api: bad cursor")
)

// jobsAPI answers the jobs.* and pools.* endpoints over Jobs.
type jobsAPI struct {
	jobs   Jobs
	nc     *nats.Conn
	prefix string
	log    zerolog.Logger
}

func (a jobsAPI) endpoints() map[string]endpoint.Func {
	return map[string]endpoint.Func{
		messages.EndpointJobsSubmit:  a.submit,
		messages.EndpointJobsStatus:  a.status,
		messages.EndpointJobsList:    a.list,
		messages.EndpointJobsCancel:  a.cancel,
		messages.EndpointJobsPrune:   a.prune,
		messages.EndpointJobsPause:   a.jobPause(a.jobs.Pause),
		messages.EndpointJobsResume:  a.jobPause(a.jobs.Resume),
		messages.EndpointPoolsPause:  a.poolPause(a.jobs.PoolPause),
		messages.EndpointPoolsResume: a.poolPause(a.jobs.PoolResume),
	}
}

func (a jobsAPI) submit(ctx context.Context, data []byte) (any, *messages.APIError) {
	return a.jobs.Submit(ctx, data, "")
}

func badJSON(err error) *messages.APIError {
	return endpoint.Err(messages.CodeBadRequest, "request is not valid JSON: "+err.Error())
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

// DecodeJobRequest decodes a request that names one job.
func DecodeJobRequest(data []byte) (messages.JobRequest, *messages.APIError) {
	var req messages.JobRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return req, e
	}
	return req, jobIDProblem(req.JobID)
}

// UnavailableOr is the API error of a failed read or write: "unavailable"
// when it failed as calls through a server cut off the cluster do, or
// while JetStream elects a leader (natsconn.ClusterLoss), so that the
// client asks again (another coordinator, or this one a moment later, can
// answer); "internal" otherwise. A request cut short because this
// coordinator's leadership term ended, or it stops, is "unavailable" too.
func UnavailableOr(err error) *messages.APIError {
	if natsconn.ClusterLoss(err) || errors.Is(err, context.Canceled) {
		// Canceled: this coordinator's term ended (or it stops) during the
		// request; another may answer it.
		return endpoint.Err(messages.CodeUnavailable, err.Error())
	}
	return endpoint.Err(messages.CodeInternal, err.Error())
}

func (a jobsAPI) status(ctx context.Context, data []byte) (any, *messages.APIError) {
	if _, e := DecodeJobRequest(data); e != nil {
		return nil, e
	}
	if !a.jobs.IsLeader() {
		// Only the leader answers (docs/design.md, "Status never goes
		// back"): its runner has the live counts, and its lease puts it on
		// the side of the cluster that takes writes. A follower that
		// answered from the record (up to StatusInterval behind, and a
		// whole fault behind when it comes from a cut-off node's copy)
		// would make counts go back between two requests that two
		// coordinators answer. With the leader out of reach, the client is
		// told unavailable and asks again, elsewhere.
		if reply, e, ok := askLeaderStatus(ctx, a.nc, a.prefix, data); ok {
			return reply, e
		}
		if e := a.jobs.NoLeader(); e != nil {
			return nil, e
		}
		return nil, endpoint.Err(messages.CodeUnavailable, "jobs.status: the leading coordinator does not answer")
	}
	return a.jobs.StatusHere(ctx, data)
}

func (a jobsAPI) list(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.ListRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if req.Limit < 0 || req.Limit > MaxListLimit {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "limit", Message: fmt.Sprintf("%d, want 0 (default %d) to %d", req.Limit, DefaultListLimit, MaxListLimit)}
	}
	reply, err := a.jobs.List(ctx, req)
	if errors.Is(err, ErrBadCursor) {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "cursor", Message: err.Error()}
	}
	if err != nil {
		return nil, endpoint.Err(messages.CodeInternal, err.Error())
	}
	return reply, nil
}

// The jobs.list page sizes.
const (
	// DefaultListLimit is jobs.list's page size when the request sets none.
	DefaultListLimit = 100
	// MaxListLimit bounds jobs.list's page size.
	MaxListLimit = 1000
)

func (a jobsAPI) cancel(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.CancelRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if e := jobIDProblem(req.JobID); e != nil {
		return nil, e
	}
	st, err := a.jobs.Cancel(ctx, req.JobID, req.Kill)
	if errors.Is(err, ErrNoJob) && a.jobs.Accepted(ctx, req.JobID) {
		st, err = a.jobs.Cancel(ctx, req.JobID, req.Kill)
	}
	switch {
	case errors.Is(err, ErrNoJob):
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", req.JobID)}
	case errors.Is(err, ErrJobFinished):
		return nil, &messages.APIError{Code: messages.CodeConflict, Field: "job_id", Message: fmt.Sprintf("job %q already ended (%s)", req.JobID, st.State)}
	case err != nil:
		return nil, endpoint.Err(messages.CodeInternal, err.Error())
	}
	return messages.StatusReply{Status: st}, nil
}

func (a jobsAPI) prune(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.PruneRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	r, err := a.jobs.Prune(ctx, req)
	var ae *messages.APIError
	switch {
	case errors.As(err, &ae):
		return nil, ae
	case err != nil:
		return nil, endpoint.Err(messages.CodeInternal, err.Error())
	}
	return *r, nil
}

func (a jobsAPI) jobPause(fn func(context.Context, string) (*messages.JobStatus, error)) endpoint.Func {
	return func(ctx context.Context, data []byte) (any, *messages.APIError) {
		req, e := DecodeJobRequest(data)
		if e != nil {
			return nil, e
		}
		st, err := fn(ctx, req.JobID)
		if errors.Is(err, ErrNoJob) && a.jobs.Accepted(ctx, req.JobID) {
			st, err = fn(ctx, req.JobID)
		}
		switch {
		case errors.Is(err, ErrNoJob):
			return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", req.JobID)}
		case errors.Is(err, ErrJobFinished):
			return nil, &messages.APIError{Code: messages.CodeConflict, Field: "job_id", Message: fmt.Sprintf("job %q already ended (%s)", req.JobID, st.State)}
		case errors.Is(err, ErrMapEnded):
			return nil, &messages.APIError{Code: messages.CodeConflict, Field: "job_id", Message: fmt.Sprintf("job %q has run its map phase (%s): nothing is left to pause", req.JobID, st.MapReason)}
		case err != nil:
			return nil, endpoint.Err(messages.CodeInternal, err.Error())
		}
		return messages.StatusReply{Status: st}, nil
	}
}

func (a jobsAPI) poolPause(fn func(context.Context, string) (*messages.PoolPauseReply, error)) endpoint.Func {
	return func(ctx context.Context, data []byte) (any, *messages.APIError) {
		var req messages.PoolRequest
		if e := endpoint.Decode(data, &req); e != nil {
			return nil, e
		}
		if req.Pool == "" {
			return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "pool", Message: "required"}
		}
		if err := messages.ValidPool(req.Pool); err != nil {
			return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "pool", Message: err.Error()}
		}
		reply, err := fn(ctx, req.Pool)
		if err != nil {
			return nil, endpoint.Err(messages.CodeInternal, err.Error())
		}
		return reply, nil
	}
}

// LeaderStatusWait bounds how long a follower waits for the leader's
// answer to a status request before it says unavailable (only the leader
// answers status, docs/design.md "Status never goes back").
const LeaderStatusWait = time.Second

// leaderStatusSubject is where the leader answers jobs.status requests
// that followers forward (not part of the public API).
func leaderStatusSubject(prefix string) string { return prefix + ".api._leader.jobs.status" }

// ServeLeaderStatus answers followers' forwarded status requests with
// status (Jobs.StatusHere) until ctx (the leader's term) ends.
func ServeLeaderStatus(ctx context.Context, nc *nats.Conn, prefix string, log zerolog.Logger, status endpoint.Func) error {
	sub, err := nc.Subscribe(leaderStatusSubject(prefix), func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(ctx, LeaderStatusWait)
		defer cancel()
		reply, e := safeCall(rctx, log, messages.EndpointJobsStatus, status, m.Data)
		var body []byte
		if e != nil {
			body, _ = json.Marshal(messages.ErrorReply{Error: e})
		} else {
			body, _ = json.Marshal(reply)
		}
		_ = m.Respond(body)
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

// askLeaderStatus forwards a status request to the leader; ok=false when
// it did not answer in time (none leads, or it is cut off).
func askLeaderStatus(ctx context.Context, nc *nats.Conn, prefix string, data []byte) (any, *messages.APIError, bool) {
	rctx, cancel := context.WithTimeout(ctx, LeaderStatusWait)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, leaderStatusSubject(prefix), data)
	if err != nil {
		return nil, nil, false
	}
	var r messages.StatusReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, nil, false
	}
	if r.Error != nil {
		return nil, r.Error, true
	}
	if r.Status == nil {
		return nil, nil, false
	}
	return r, nil, true
}
