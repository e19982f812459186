// Package jobrun is the coordinator's engine, behind pkg/coordinator's
// face: it owns a job from its submission to its end and the services of a
// leadership term.
//
//   - intake (coordinator.go, admit.go, input.go, intakewait.go): accepting,
//     validating and recording a submitted job;
//   - the job state machine (job.go, phase.go, policy.go, notbefore.go):
//     where a job's state changes, its step policy, its not-before time;
//   - publishing and results (publisher.go, priority.go, pools.go,
//     results.go, reduce.go, origin.go): the work window, the pools' fair
//     share, the results consumer, the reduce step;
//   - the API (jobsapi.go, apiserver.go, dlqapi.go, index.go, agents.go): the
//     jetfleet micro service's endpoints, the job index, the agents present;
//   - the leader's services (leader.go, pause.go, budgets.go, breaker.go):
//     the lease, pauses, budgets and breakers;
//   - a DLQ replay's reopening of a job (replayreopen.go, reopen.go): the
//     Replayer's ReopenFunc, which restarts or holds the job's runner;
//   - the faces it gives the services that live in packages of their own
//     (services.go): internal/scheduler (a schedule fires in its fire.go),
//     internal/retention (settle cleanup, expiry, jobs.prune) and
//     internal/replay (the replays' records and runs, their holds) each
//     take only the interface of the jobs they need, never the
//     Coordinator.
//
// It may not be imported by pkg/client: a submitter imports nothing of
// the daemons. Users import pkg/coordinator.
package jobrun
