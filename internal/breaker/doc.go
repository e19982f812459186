// Package breaker shares circuit breakers' states among a pool's agents
// (docs/retries.md): a job's breaker is the value of its key in the
// breaker bucket, <pool>.<job>, a step's own <pool>.<job>.<step>. A Gate
// caches each state, kept fresh by a watch, so that a closed breaker
// costs no request, and writes only a change of state, by compare-and-set
// (internal/kvstate), so that two agents never both take the last
// half-open probe.
//
// It owns the stored states and nothing of the decisions: when a breaker
// admits, opens or closes is internal/retry's Breaker, applied by the
// function an Update is given; what a refused delivery does (park, fail
// fast) is the agent's (internal/itemrun, breaker.go).
package breaker
