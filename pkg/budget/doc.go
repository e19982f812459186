// Package budget is a retry budget shared by any number of processes,
// held in a NATS KV bucket: a job (or anything with a name) gets a number
// of retries all its items may spend together, and optionally a cap per
// item; every process asks before it retries, and the bucket's
// compare-and-set never grants more than the total, under any
// concurrency. It is the budget jetfleet's agents claim from before every
// retry (AD-44), usable on its own in any Go program with a JetStream
// connection.
//
// Create the bucket ([BucketConfig]), build one [Budget] per process
// ([New]), create a job's budget ([Budget.Create]; a second Create of the
// same job keeps the first), and [Budget.Claim] one retry before each
// retry: a [Grant] either grants it or carries a [Deny] that says which
// limit refused it (item_budget_exhausted or job_budget_exhausted, with
// the consumed count and the limit). [Budget.Get] reads a budget back. A
// budget never refills.
//
// Concurrent claims of one process on one job are coalesced into one
// compare-and-set; denials after exhaustion cost no request. On a
// replicated bucket build the Budget [WithJetStream], so that the reads
// behind compare-and-set go to the stream's leader. docs/retries.md §8
// has the semantics.
package budget
