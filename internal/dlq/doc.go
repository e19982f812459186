// Package dlq is jetfleet's dead-letter queue: the FLEET_DLQ stream (Limits
// retention, never WorkQueue, so it stays browsable) on subjects
// <prefix>.dlq.<job>, and what reads and writes it.
//
//   - [Writer] is what agents use to dead-letter an item: publish the entry,
//     wait for the PubAck, and only then Term the work message. Entries are
//     de-duplicated by a message id derived from job, item and generation
//     ([EntryMsgID]), so an agent that dies after publishing and publishes
//     again leaves one entry. A full stream is reported as [ErrFull]: the
//     agent keeps the item (NakWithDelay) and tries again later.
//   - [Mover] dead-letters work messages that exhausted their consumer's
//     MaxDeliver, from the durably captured MAX_DELIVERIES advisories.
//   - [Inspector] lists, gets, summarises ([Inspector.Stats]), exports (JSON
//     lines) and purges entries. A [messages.DLQFilter] selects them (job,
//     reason, error class, signature prefix, text, time range, limit), and a
//     [Matcher] is the one place that decides what it selects.
//   - [Replayer] republishes entries to their work subjects as the item's
//     next generation: reopen marker on the results stream, then the item
//     with a fresh msg id (<job>/<item>/<generation>), then, after its
//     PubAck, the entry's deletion. Each step is idempotent, so a replay
//     interrupted anywhere and run again replays each entry once. Replays
//     are paced by a [Limiter] ([TokenBucket] on an injected [Clock]).
//   - [Monitor] keeps the DLQ [Metrics] current and warns when the stream
//     passes 80% of its limits.
//
// The coordinator serves all of it as the dlq.* endpoints of the jetfleet
// micro service; docs/dlq.md is the operator's runbook.
package dlq
