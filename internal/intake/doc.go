// Package intake takes in the durable submissions of the jobs stream
// while its coordinator leads (Run, intake.go): its consumer, pulled by
// bytes with a bounded read-ahead; up to 64 submissions accepted at once,
// those naming the same job id one after the other; rejections written a
// few at a time; each delivery kept alive while it is accepted; a
// submission that keeps failing retried with a backoff, then rejected
// with the last reason. It also bounds the open jobs (slots.go): at
// MaxOpenJobs, submissions wait in the stream and are let in in the order
// they were taken.
//
// It owns the intake consumer and the order of acceptance, nothing else.
// It may not read or write a job's record or start its runner: accepting
// or rejecting a submission, and counting the unfinished jobs, are the
// narrow Jobs interface that internal/jobrun gives it (where a submission
// becomes a job: jobrun's accept, coordinator.go).
package intake
