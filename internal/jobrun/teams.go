package jobrun

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

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
