package wire

import "github.com/jetfleet/jetfleet/pkg/messages"

// TeamEndpoints are the API endpoints served on each team's subjects
// (messages.Names.TeamAPISubject): the coordinator serves them there and
// internal/auth grants a team's key exactly these. Everything else
// (pruning, schedules, pausing a pool, purging dead letters) stays the
// operator's.
var TeamEndpoints = []string{
	messages.EndpointJobsSubmit, messages.EndpointJobsStatus, messages.EndpointJobsList,
	messages.EndpointJobsCancel, messages.EndpointJobsPause, messages.EndpointJobsResume,
	messages.EndpointDLQList, messages.EndpointDLQGet, messages.EndpointDLQStats, messages.EndpointDLQReplay,
}
