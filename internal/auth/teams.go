package auth

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// RoleTeam is a team's submitter (user submitter-<team>): it submits jobs
// to its team's pools and reads, cancels, pauses and replays its team's
// jobs only, through its team's API subjects
// (messages.Names.TeamAPISubject). The coordinator takes the caller's
// team from the subject; the server lets each team's key publish on its
// own team's subjects only. Not in Roles: its permissions depend on the
// team (TeamPermissions).
const RoleTeam Role = "team"

// TeamUser is the user name of team's submitters.
func TeamUser(team string) string { return "submitter-" + team }

// TeamPermissions returns the permissions of team's submitters: its
// team's API subjects, uploads of inputs, and its own inbox. No durable
// intake (fleet.jobs.submit: a submission there names no caller), no
// events (they name every job), no stream or bucket reads.
func TeamPermissions(names messages.Names, team string) (Permissions, error) {
	if err := messages.ValidToken(team); err != nil {
		return Permissions{}, fmt.Errorf("auth: team %q: %w", team, err)
	}
	var j js
	uploads := names.UploadsBucket()
	var pub []string
	for _, e := range wire.TeamEndpoints {
		pub = append(pub, names.TeamAPISubject(team, e))
	}
	// fleetctl submit uploads a local input (as RoleSubmitter does).
	pub = append(pub, "$O."+uploads+".C.>", "$O."+uploads+".M.>", j.api("STREAM.INFO", objStream(uploads)))
	return Permissions{
		Publish:   SubjectPermission{Allow: pub},
		Subscribe: SubjectPermission{Allow: []string{inboxes}},
	}, nil
}

// ParseTeams reads teams written as "red=poola+poolb,blue=poolc": each
// team and the pools it may submit to. A team written alone ("red") may
// submit to the pool of its name.
func ParseTeams(s string) (map[string][]string, error) {
	teams := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		team, pools, ok := strings.Cut(part, "=")
		team = strings.TrimSpace(team)
		if !ok {
			pools = team
		}
		if err := messages.ValidToken(team); err != nil {
			return nil, fmt.Errorf("auth: team %q: %w", team, err)
		}
		if _, dup := teams[team]; dup {
			return nil, fmt.Errorf("auth: team %q given twice", team)
		}
		var list []string
		for _, p := range strings.Split(pools, "+") {
			p = strings.TrimSpace(p)
			if err := messages.ValidPool(p); err != nil {
				return nil, fmt.Errorf("auth: team %s: pool %q: %w", team, p, err)
			}
			list = append(list, p)
		}
		slices.Sort(list)
		teams[team] = slices.Compact(list)
	}
	return teams, nil
}

// FormatTeams writes teams as ParseTeams reads them, in order.
func FormatTeams(teams map[string][]string) string {
	names := make([]string, 0, len(teams))
	for t := range teams {
		names = append(names, t)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, t := range names {
		parts[i] = t + "=" + strings.Join(teams[t], "+")
	}
	return strings.Join(parts, ",")
}
