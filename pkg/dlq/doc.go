// Package dlq reads jetfleet's dead letters: the items that ran out of
// retries, each with its payload, every attempt, the reason it gave up,
// and an error class and signature to group it by. A [Reader] lists them
// a page at a time, gets one by its stream sequence, summarises them
// ([Reader.Stats]: counts by job, reason, error class and signature) and
// exports them as JSON lines, all selected by a [Filter] — the same
// filters `fleetctl dlq` takes (job, reason, error class, signature
// prefix, text, time range, limit).
//
// A Reader reads the DLQ stream (<PREFIX>_DLQ) directly with JetStream,
// so it needs no coordinator: a monitoring job, a notebook or a support
// tool in another service can use it with read access to the stream
// alone. Replaying and purging change the fleet's jobs, and stay the
// coordinator's (its dlq.replay and dlq.purge endpoints, `fleetctl dlq
// replay`). docs/dlq.md is the operator's runbook.
package dlq
