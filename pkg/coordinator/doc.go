// Package coordinator is jetfleet's coordinator as a library: it accepts jobs
// (the jetfleet micro service under <prefix>.api.> and the durable subject
// <prefix>.jobs.submit), expands them into work items, publishes them to the
// work stream with de-duplication ids, a max_parallel window and a fair
// share of the pool (Config.JobQueue), follows their results, and keeps
// each job's status in the fleet_jobs bucket.
//
// All coordinator state lives in JetStream: the job record (spec, status and
// publishing cursor) in KV, the outcomes in the results stream. A restarted
// coordinator resumes every unfinished job by replaying its results, so its
// counts stay exact. Several coordinators of one prefix may run: one leads
// (a lease in the control bucket), the others answer the API and take over
// when the lease lapses (docs/design.md, "Several coordinators").
//
// This package is a face: New, Config, Run, Ready, OnLeader, Leader and the
// defaults. The engine is internal (internal/jobrun, mapped in
// docs/design.md "Packages"); a program that embeds a coordinator submits,
// follows, pauses and prunes its jobs through pkg/client, like any other
// submitter.
package coordinator
