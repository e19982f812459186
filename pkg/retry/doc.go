// Package retry is jetfleet's retry arithmetic as a small library: a
// policy compiled from a retry_config ([messages.RetryConfig], the same
// settings a job spec's step takes), the delay it gives after failed
// attempt n, its whole timeline ([Policy.Plan]), which errors it retries,
// and the marker errors a Go handler returns to steer its retries
// ([Permanent], [After], [Snooze]) with their readers.
//
// It needs no NATS connection and never sleeps or reads the clock: a
// caller asks for a delay and waits however it likes (a timer,
// NakWithDelay, a scheduled message). The randomness of jitter is a
// [Rand] the caller passes ([NewRand] for a seeded one; nil for
// math/rand/v2's global source).
//
// After failed attempt n (1-based), with I = initial_delay (1s) and
// cap = max_delay (30s):
//
//	fixed        I
//	linear       I + increment·(n−1)       increment defaults to I
//	exponential  I·base^(n−1)              base defaults to 2 (the default strategy)
//	fibonacci    I·fib(n)                  fib = 1, 1, 2, 3, 5, 8, …
//	custom       delays[n−1]               max_delay past the end of the list
//
// then capped at max_delay, then jittered when jitter is on, then clamped
// to [0, max_delay]; the arithmetic never overflows, at any n.
// docs/retries.md has worked timelines and the error classes.
//
// jetfleet's agent decides with the same engine (it adds a persisted
// per-step state, a duration budget and a job-level budget, package
// budget); package agent's markers are this package's.
package retry
