// Package httpstep is the agent's built-in http step (`handler: http`,
// docs/security.md): its arguments templated over the item (step.go), the
// call and how its failures retry (Do), the guard of the addresses a step
// may reach (guard.go) and the redirects it follows (redirect.go).
//
// It owns the step's HTTP client rules and nothing of the agent: it reads
// only the attempt's Call and returns an output or an error marked for
// internal/retry; the agent (internal/itemrun) registers it, builds its
// Guard from the agent's http_allow and connection, and records the
// outcome.
package httpstep
