// Package itemrun is the agent's engine, behind pkg/agent's face: it owns a
// work item from its pull to its outcome.
//
//   - the run loop (agent.go, pull.go, pullsub.go, pulledmsg.go, process.go,
//     stepctx.go, heartbeat.go, batch.go, commit.go): pulling, running the
//     steps, batching results and acks;
//   - the failure path (failpath.go, park.go, hold.go, release.go): where a
//     failed step's retry is decided (failpath.go, with internal/failure's
//     policy) and where a delayed retry is parked and released;
//   - the guards (breaker.go, limit.go, kill.go, schema.go): the circuit
//     breakers, the fleet-wide limits, cancel with kill, newer schemas;
//   - the built-in steps (handler.go, claude.go, capture.go, itemdir.go):
//     noop, sleep, flaky, claude, captured output and the items' working
//     directories; the http step lives in internal/httpstep, which the
//     agent registers (Agent.httpStep, agent.go);
//   - the user-facing types (handler.go, typed.go, middleware.go,
//     config.go), which pkg/agent re-exports as aliases.
//
// Users import pkg/agent; nothing in pkg/ but pkg/agent imports this.
package itemrun
