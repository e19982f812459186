package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Teams (the coordinator's Config.Teams) share a fleet without seeing
// each other. A team's submitters call the API on their team's subjects
// (messages.Names.TeamAPISubject), which the server lets only that team's
// key publish on (fleetctl auth init --teams): NATS tells a responder the
// subject of a request, not its sender, so the subject is how the
// coordinator knows the caller. On those subjects a job is submitted for
// the team, to the team's pools only, and a job of another team (or of
// none) is "not found", whatever the request.

// teamsAPI answers the endpoints on the teams' subjects.
type teamsAPI struct {
	teams     map[string][]string
	jobs      Jobs
	endpoints map[string]endpoint.Func // the fleet's, which a team's call narrows
}

// errNotTeams answers a request on the subjects of a team the coordinator
// does not know.
func errNotTeams(team string) *messages.APIError {
	return endpoint.Err(messages.CodeBadRequest, fmt.Sprintf("team %q is not one of the coordinator's --teams", team))
}

// call answers endpoint name for team.
func (a teamsAPI) call(ctx context.Context, team, name string, data []byte) (any, *messages.APIError) {
	if _, ok := a.teams[team]; !ok || messages.ValidToken(team) != nil {
		return nil, errNotTeams(team)
	}
	switch name {
	case messages.EndpointJobsSubmit:
		return a.jobs.Submit(ctx, data, team)
	case messages.EndpointJobsList:
		return a.list(ctx, team, data)
	case messages.EndpointDLQGet:
		return a.dlqGet(ctx, team, data)
	case messages.EndpointDLQList, messages.EndpointDLQStats, messages.EndpointDLQReplay:
		var f struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, badJSON(err)
		}
		if f.JobID == "" {
			return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "job_id",
				Message: "required on a team's subjects: a team reads and replays the dead letters of its own jobs, one job at a time"}
		}
		if e := a.owns(ctx, team, f.JobID); e != nil {
			return nil, e
		}
		return a.endpoints[name](ctx, data)
	default: // jobs.status, jobs.cancel, jobs.pause, jobs.resume
		var req struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, badJSON(err)
		}
		if e := a.owns(ctx, team, req.JobID); e != nil {
			return nil, e
		}
		return a.endpoints[name](ctx, data)
	}
}

// owns answers nil when job id is team's, and "not found" when it is
// another team's, no team's, or no job: a team learns nothing of the
// jobs of others.
func (a teamsAPI) owns(ctx context.Context, team, id string) *messages.APIError {
	if e := jobIDProblem(id); e != nil {
		return e
	}
	status, spec, err := a.jobs.Teams(ctx, id)
	switch {
	case errors.Is(err, ErrNoJob):
	case err != nil:
		return UnavailableOr(err)
	case status == team || spec == team:
		return nil
	}
	return &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", id)}
}

// list is jobs.list of team's jobs. Its total and per-state counts are
// those of the page: the fleet's would tell of other teams' jobs.
func (a teamsAPI) list(ctx context.Context, team string, data []byte) (any, *messages.APIError) {
	reply, e := a.endpoints[messages.EndpointJobsList](ctx, data)
	if e != nil {
		return nil, e
	}
	lr := reply.(messages.ListReply)
	lr.Jobs = slices.DeleteFunc(lr.Jobs, func(st messages.JobStatus) bool { return st.Team != team })
	lr.Total = len(lr.Jobs)
	lr.States = map[string]int{}
	for _, st := range lr.Jobs {
		lr.States[st.State]++
	}
	return lr, nil
}

// dlqGet is dlq.get of an entry of one of team's jobs.
func (a teamsAPI) dlqGet(ctx context.Context, team string, data []byte) (any, *messages.APIError) {
	reply, e := a.endpoints[messages.EndpointDLQGet](ctx, data)
	if e != nil {
		return nil, e
	}
	r := reply.(messages.DLQGetReply)
	if r.Entry == nil || a.owns(ctx, team, r.Entry.Entry.JobID) != nil {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "seq", Message: "no such entry"}
	}
	return r, nil
}
