// Package scheduler is the coordinator's service of schedules
// (docs/schedules.md): it serves the schedules.* endpoints on every
// coordinator and, while its coordinator leads, fires the schedules'
// ticks (Run, fire.go). A schedule fires in two steps: the decision (the
// tick's run, or its skip, by internal/schedule's Plan) is written to the
// schedule's record by compare-and-set, then the run's job is submitted
// with an id derived from the schedule and the tick and the run is marked
// submitted (submitRuns, api.go).
//
// It owns the schedules bucket and nothing else. It may not touch a job's
// record, streams or runner: it submits a job, checks a job's spec and
// reads a job's state through the narrow Jobs interface that
// internal/jobrun gives it, and it runs only inside the leader's term,
// whose context is its leader check.
package scheduler
