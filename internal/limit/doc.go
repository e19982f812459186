// Package limit keeps the fleet's rate and concurrency limits: the pure
// arithmetic of one limit's record (a token bucket, concurrency slots
// leased per agent, AIMD adaptation), the store that shares the records
// in a KV bucket through internal/kvstate, and the agent-side [Limiter]
// that takes tokens in batches and waits without spinning on KV.
//
// A record's tokens refill at its current rate up to its burst; a take
// removes whole tokens. Concurrency slots are held per agent as a count
// with an expiry (a lease): every take or release by the agent extends
// it, and an agent that dies stops extending it, so its slots come back
// when the lease runs out; nothing is a counter that can leak. The
// decisions take the time as an argument and never read a clock.
package limit
