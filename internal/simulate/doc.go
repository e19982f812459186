// Package simulate shows what a job's retry policy does to a dependency
// that fails, before the job ships: how many calls the dependency sees
// while it is down and after it comes back, how much of the job retry
// budget the outage burns and when it runs out, which items are
// dead-lettered and which recover, and when the job ends.
//
// [Run] is a discrete-event simulation in virtual time — no sleeping, no
// server — of the job's items going through its steps on a fleet of
// agents × concurrency slots. It decides with the fleet's own pure code, so
// the simulator and the fleet cannot disagree on a decision:
//
//   - each failed step run with [retry.Policy.DecideAssessed], the code
//     behind the agent's [retry.Policy.Decide] (the failure is assessed
//     once with [retry.Policy.Assess]);
//   - each retry claims a unit with [budget.Record.Claim] (per-item cap
//     first, then the job budget), the decision the agents' KV
//     compare-and-set loop makes, from the record [budget.Effective]
//     computes for the job and the operator's settings;
//   - the job's circuit breaker with [retry.Breaker] Admit and Settle, and
//     parked deliveries come back after [failure.ParkDelay];
//   - error_policy with [retry.Workflow]: on_item_failure (dlq, skip, stop,
//     retry, custom), max_failures, failure_threshold.
//
// The fleet's timing is modelled as jetfleet runs on JetStream: a retry is
// a NakWithDelay redelivery, or a local retry when its delay is at most
// Fleet.LocalRetryMax (it waits in its agent and goes to the back of that
// agent's buffer when due, at most itemrun.MaxLocalRetries in a row,
// spending no delivery); the server serves due redeliveries before new
// messages, in the order they became due, to the waiting pull requests
// round-robin; each agent pulls as its pull loop does (pkg/agent: a buffer
// of Prefetch messages, refilled once its request has been served and it
// is at most half full), so a busy agent may hold messages another agent
// could run; MaxAckPending stops new deliveries while that many
// messages are unacknowledged (waiting out a backoff included);
// MaxDeliver is the backstop on deliveries (parked ones count); the job's
// max_parallel bounds its in-flight items; a best-effort deadline ends the
// job. Not modelled: agent crashes and AckWait redeliveries, KV and
// network latency (every decision is instant), reduce steps, and groups
// (best-effort min_groups).
//
// The dependency is one step of the job (Dependency.Step); the others
// always succeed. An outage is a window with an error rate (1 = down, 0.3
// = a partial outage), optionally a slow dependency (calls take
// Dependency.Slow, cut by the step's timeout), a 429 with Retry-After
// (Dependency.RetryAfter, through retry.After), and a recovery ramp.
//
// `fleetctl simulate` is the command line over this package; docs/simulate.md
// has worked examples, and internal/e2e checks the simulator against a real
// fleet on an embedded server.
package simulate
