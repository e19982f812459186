// Package jobrun is the coordinator's engine, behind pkg/coordinator's
// face: it owns a job from its submission to its end and the services of a
// leadership term.
//
//   - a submission's acceptance (coordinator.go's accept, admit.go,
//     input.go, intakewait.go, intake.go): validating and recording a
//     submitted job; the durable intake's consumer, its order and the open
//     jobs' limit are internal/intake's, which pools a job may name
//     internal/poolset's;
//   - the job state machine (job.go, phase.go, policy.go, notbefore.go):
//     where a job's state changes, its step policy, its not-before time;
//   - publishing and results (publisher.go, priority.go, results.go,
//     reduce.go, origin.go): the work window, the pools' fair share, the
//     results consumer, the reduce step;
//   - the jobs' side of the API (submit.go, apijobs.go, index.go, agents.go):
//     a submission's admission, the leader's status answer, the job index,
//     the agents present, and the face of the jobs (apiJobs) that
//     internal/api, which serves the jetfleet micro service, takes;
//   - the DLQ service (dlqservice.go): the inspector, replayer and monitor of
//     the dead letters, the item pools of finished jobs that replays route
//     by;
//   - the leader's services (leader.go, pause.go, budgets.go, breaker.go):
//     the lease, pauses, budgets and breakers;
//   - a DLQ replay's reopening of a job (replayreopen.go, reopen.go): the
//     Replayer's ReopenFunc, which restarts or holds the job's runner;
//   - the faces it gives the services that live in packages of their own
//     (services.go, apijobs.go, intake.go): internal/scheduler (a schedule
//     fires in its fire.go), internal/retention (settle cleanup, expiry,
//     jobs.prune), internal/replay (the replays' records and runs, their
//     holds), internal/api (the API's server and endpoints) and
//     internal/intake (the durable intake) each take only the interface
//     of the jobs they need, never the Coordinator.
//
// It may not be imported by pkg/client: a submitter imports nothing of
// the daemons. Users import pkg/coordinator.
package jobrun
