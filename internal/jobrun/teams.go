package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Teams (Config.Teams) share a fleet without seeing each other. A team's
// submitters call the API on their team's subjects
// (messages.Names.TeamAPISubject), which the server lets only that team's
// key publish on (fleetctl auth init --teams): NATS tells a responder the
// subject of a request, not its sender, so the subject is how the
// coordinator knows the caller. On those subjects a job is submitted for
// the team, to the team's pools only, and a job of another team (or of
// none) is "not found", whatever the request.

// serveTeams adds the team endpoints to the API's group (prefix.api):
// subjects team.*.<endpoint>, the team read from each request's subject.
func (c *Coordinator) serveTeams(g micro.Group, wrap func(name string, fn endpointFunc) micro.Handler) error {
	if len(c.cfg.Teams) == 0 {
		return nil
	}
	prefix := c.cfg.Prefix + ".api.team."
	for _, name := range wire.TeamEndpoints {
		h := micro.HandlerFunc(func(req micro.Request) {
			team, _, _ := strings.Cut(strings.TrimPrefix(req.Subject(), prefix), ".")
			wrap(name, func(ctx context.Context, data []byte) (any, *messages.APIError) {
				return c.teamCall(ctx, team, name, data)
			}).Handle(req)
		})
		if err := g.AddEndpoint("team_"+strings.ReplaceAll(name, ".", "_"), h, micro.WithEndpointSubject("team.*."+name)); err != nil {
			return fmt.Errorf("coordinator: team endpoint %s: %w", name, err)
		}
	}
	return nil
}

// errNotTeams answers a request on the subjects of a team the coordinator
// does not know.
func errNotTeams(team string) *messages.APIError {
	return apiErr(messages.CodeBadRequest, fmt.Sprintf("team %q is not one of the coordinator's --teams", team))
}

// teamCall answers endpoint name for team.
func (c *Coordinator) teamCall(ctx context.Context, team, name string, data []byte) (any, *messages.APIError) {
	if _, ok := c.cfg.Teams[team]; !ok || messages.ValidToken(team) != nil {
		return nil, errNotTeams(team)
	}
	switch name {
	case messages.EndpointJobsSubmit:
		return c.submitAs(ctx, data, team)
	case messages.EndpointJobsList:
		return c.teamList(ctx, team, data)
	case messages.EndpointDLQGet:
		return c.teamDLQGet(ctx, team, data)
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
		if e := c.teamOwns(ctx, team, f.JobID); e != nil {
			return nil, e
		}
		return c.dlqEndpoints()[name](ctx, data)
	default: // jobs.status, jobs.cancel, jobs.pause, jobs.resume
		var req struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, badJSON(err)
		}
		if e := c.teamOwns(ctx, team, req.JobID); e != nil {
			return nil, e
		}
		fn := map[string]endpointFunc{
			messages.EndpointJobsStatus: c.apiStatus,
			messages.EndpointJobsCancel: c.apiCancel,
		}[name]
		if fn == nil {
			fn = c.pauseEndpoints()[name]
		}
		return fn(ctx, data)
	}
}

// teamOwns answers nil when job id is team's, and "not found" when it is
// another team's, no team's, or no job: a team learns nothing of the
// jobs of others.
func (c *Coordinator) teamOwns(ctx context.Context, team, id string) *messages.APIError {
	if e := jobIDProblem(id); e != nil {
		return e
	}
	rec, err := c.store.getFromLeader(ctx, id)
	if errors.Is(err, errNoJob) && c.accepted(ctx, id) {
		rec, err = c.store.getFromLeader(ctx, id)
	}
	switch {
	case errors.Is(err, errNoJob):
	case err != nil:
		return unavailableOr(err)
	case rec.Status.Team == team || rec.Spec != nil && rec.Spec.Team == team:
		return nil
	}
	return &messages.APIError{Code: messages.CodeNotFound, Field: "job_id", Message: fmt.Sprintf("no job %q", id)}
}

// teamList is jobs.list of team's jobs. Its total and per-state counts
// are those of the page: the fleet's would tell of other teams' jobs.
func (c *Coordinator) teamList(ctx context.Context, team string, data []byte) (any, *messages.APIError) {
	reply, e := c.apiList(ctx, data)
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

// teamDLQGet is dlq.get of an entry of one of team's jobs.
func (c *Coordinator) teamDLQGet(ctx context.Context, team string, data []byte) (any, *messages.APIError) {
	reply, e := c.apiDLQGet(ctx, data)
	if e != nil {
		return nil, e
	}
	r := reply.(messages.DLQGetReply)
	if r.Entry == nil || c.teamOwns(ctx, team, r.Entry.Entry.JobID) != nil {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "seq", Message: "no such entry"}
	}
	return r, nil
}

// teamProblem checks a job of team against Config.Teams: the team must
// be known and the job's pool one of its pools. A job of no team passes.
func (c *Coordinator) teamProblem(spec *messages.JobSpec) *messages.FieldError {
	if spec.Team == "" {
		return nil
	}
	pools, ok := c.cfg.Teams[spec.Team]
	if !ok {
		return &messages.FieldError{Field: "team", Message: fmt.Sprintf("team %q is not one of the coordinator's --teams", spec.Team)}
	}
	pool := spec.Pool
	if pool == "" {
		pool = messages.DefaultPool
	}
	if !slices.Contains(pools, pool) {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf("team %s may not submit to pool %q; its pools are %s", spec.Team, pool, strings.Join(pools, ", "))}
	}
	return nil
}

// teamMayRoute reports whether a group of a job of team may be routed to
// pool: a team's items run on its own pools only.
func (c *Coordinator) teamMayRoute(team, pool string) bool {
	return team == "" || slices.Contains(c.cfg.Teams[team], pool)
}
