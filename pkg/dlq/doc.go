// Package dlq is jetfleet's dead-letter queue: the writer agents use to
// dead-letter items (publish, wait for the PubAck, only then Term the work
// message), and the tools to inspect and replay entries.
//
// The DLQ is the FLEET_DLQ stream with Limits retention (never WorkQueue, so
// it stays browsable), subjects <prefix>.dlq.<job>. Entries are de-duplicated
// by a message id derived from the job, item and generation, so a writer that
// crashes after publishing and publishes again leaves one entry.
package dlq
