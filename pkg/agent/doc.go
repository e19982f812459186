// Package agent is jetfleet's agent as a library. An agent pulls work items
// of one pool from JetStream with bounded concurrency, runs each item's
// steps — shell commands and Go handlers registered with [Agent.Handle] —
// and reports one result per finished item.
//
// Failures are retried by redelivery, never by sleeping: the agent asks the
// step's retry policy (package retry) for a decision, claims a unit of the
// job's retry budget, persists the item's retry state in the fleet_items
// bucket and calls NakWithDelay with the computed delay, or, for a delay of
// Config.ParkAfter or more, parks it: a copy of the message scheduled for
// that time in the park stream, and the delivery acked, so that no
// consumer slot is held while it waits. Whichever agent receives the item
// next resumes it at the failed step. A delay of Config.LocalRetryMax or
// less waits in the agent instead, holding no slot, and the agent runs the
// step again itself, up to three times in a row; the state is then written
// once, as the delivery leaves the agent (Config.LocalRetryDurable: before
// each). An item that gives
// up is dead-lettered (publish, PubAck, then Term) with its full history.
// What follows a failed step run is decided by two pure verdicts
// (internal/failure), which the outage simulator calls too; so is a run
// that cannot begin (the step's own circuit breaker is open, or the job's
// agent_timeout is up for the item).
//
// A shell step gets the item's variables (ITEM_JSON, ITEM_ID, JOB_ID,
// ATTEMPT), the job's env and the agent's variables that Config.StepEnv
// allows, never the agent's NATS settings; it is bounded by its timeout or
// Config.StepTimeout; with Config.Reaper nothing it starts outlives it
// (docs/security.md, "Shell steps").
//
// Handlers: [Agent.Handle] takes the raw [Call]; [HandleFunc] and
// [HandleWith] (or [Typed] and [TypedWith] for a map of handlers) decode
// the item, and the step's with: arguments, into Go types, and a decoding
// error is permanent and names the field ([DecodeError]). [Permanent],
// [After] and [Snooze] steer retries. [Agent.Use] adds middleware around
// every handler; a panic fails only its step ([Recover], [PanicError]).
// The agent announces its handlers' names in its presence, and the
// coordinator refuses a job naming one no present agent of the pool has
// (docs/go-api.md).
//
// Handlers and commands must be idempotent: delivery is at-least-once, and a
// crash between a step's side effect and the acknowledgement runs it again.
//
// This package is a face: the run loop, the failure path, parking, the
// breakers, the limits and the built-in steps are internal/itemrun's
// (mapped in docs/design.md "Packages"); the types a handler sees (Call,
// HandlerFunc, Middleware, Config) are aliases of that package's.
package agent
