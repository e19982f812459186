// Package client is what a service that submits jobs to a jetfleet fleet
// imports: it calls the coordinator's API (the jetfleet micro service,
// <prefix>.api.>) over a NATS connection, and depends on nats.go,
// package messages and the OpenTelemetry trace API only — nothing of the
// daemons (the test in this package checks it with go list -deps).
//
// Its methods are named after the API's endpoints, noun then verb:
//
//	jobs       JobSubmit, JobSubmitSpec, JobStatus, JobList, JobListPage,
//	           JobWait, JobCancel, JobPause, JobResume, JobPrune
//	pools      PoolPause, PoolResume
//	dlq        DLQList, DLQGet, DLQStats, DLQExport, DLQReplay, DLQReplays,
//	           DLQReplayCancel, DLQPurge
//	schedules  ScheduleAdd, ScheduleGet, ScheduleList, SchedulePause,
//	           ScheduleResume, ScheduleTrigger, ScheduleRemove
//
// and [Client.Call] sends any request to any endpoint. A bad request comes
// back as a *messages.APIError naming the field; a request that finds no
// coordinator serving is sent again for [NoCoordinatorWait], then returns
// [ErrNoCoordinator]. Reads are sent again when a coordinator does not
// answer ([ReadAttempt]); a submission too ([SubmitAttempt]), under the
// same job id, so that it is one job; a change (cancel, pause) is sent
// only once to a coordinator that got it. [WithFailover] moves the
// connection to another server of its list when the one it is on finds no
// coordinator.
//
// Everything here can be done with the nats CLI as well:
// `nats req fleet.api.jobs.submit "$(cat job.json)"`.
package client
