// Package retention removes what finished jobs leave in JetStream
// (docs/deploy.md, "Retention"), in two steps: a settled job's cleanup
// (its item state, budget, breaker keys, results, leftover work, parked
// retries and objects), then, JobRetention after it finished, the
// deletion of its record with its events and its submission. The leader
// runs a pass every CleanupInterval (Run); jobs.prune does the same on
// demand (JobPrune).
//
// It owns the cleanup_at and cleaned_at marks of a job's record and the
// purges of a job's data. It may not start, reopen or otherwise change a
// job: it reads and writes a job's record only by compare-and-set through
// the Jobs interface internal/jobrun gives it, and leaves alone a job
// that the coordinator still follows (a lingering runner, a replay's
// hold). A DLQ replay refuses to reopen a job whose cleanup began.
package retention
