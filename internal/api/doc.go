// Package api serves the coordinator's API, the jetfleet micro service
// (docs/design.md, "Who writes, who reads"): its endpoints' subjects, on
// the prefix's group and on the teams' subjects, and the all-coordinators
// subject of jobs.status (server.go); each request off the subscription,
// bounded and with a deadline, a panic answered as an internal error; the
// health checks that stop a coordinator cut off the cluster from serving
// while another serves (health.go); a follower's jobs.status forwarded to
// the leader (jobs.go); the jobs.*, pools.* and dlq.* endpoints' decoding,
// checks and error replies (jobs.go, dlq.go); and what a team may see and
// do on its own subjects (teams.go).
//
// It owns no job and no bucket. It may not read or write a job's record,
// its runner or its streams: it reaches the jobs only through the narrow
// Jobs interface that internal/jobrun gives it (submit, a status, the
// index, cancel, pause, prune, a job's teams), and the dead letters through
// internal/dlq's Inspector and Replayer and internal/replay's Replays.
// Whether this coordinator reaches the cluster is the Probe it is given.
package api
