package api

import (
	"context"
	"maps"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Endpoints are what the API answers with: the jobs (jobs.*, pools.*),
// the dead letters (dlq.*), and the endpoints of other services served
// beside them (internal/scheduler's schedules.*).
type Endpoints struct {
	Jobs Jobs
	DLQ  DLQ
	// Extra are served as they are, over any of the above of the same name.
	Extra map[string]endpoint.Func
	// Teams are the coordinator's teams and their pools; none serves no
	// team subjects.
	Teams map[string][]string
	// Conn and Prefix reach the leader (a follower forwards jobs.status).
	Conn   *nats.Conn
	Prefix string
	Logger zerolog.Logger
}

// All returns every endpoint's answer by name.
func (e Endpoints) All() map[string]endpoint.Func {
	m := jobsAPI{jobs: e.Jobs, nc: e.Conn, prefix: e.Prefix, log: e.Logger}.endpoints()
	maps.Copy(m, dlqAPI{insp: e.DLQ.Inspector, rep: e.DLQ.Replayer, replays: e.DLQ.Replays, log: e.Logger}.endpoints())
	maps.Copy(m, e.Extra)
	return m
}

// Team returns what answers an endpoint on a team's subjects, given all
// the endpoints (All); nil when there are no teams.
func (e Endpoints) Team(all map[string]endpoint.Func) func(ctx context.Context, team, name string, data []byte) (any, *messages.APIError) {
	if len(e.Teams) == 0 {
		return nil
	}
	return teamsAPI{teams: e.Teams, jobs: e.Jobs, endpoints: all}.call
}
