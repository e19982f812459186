// Package retry is jetfleet's retry policy as pure code (docs/contract.md §4): backoff
// strategies, jitter, error matchers, the duration budget, decisions for a
// failed attempt, marker errors for Go handlers, on_failure actions, the
// circuit breaker and the workflow error policy. It is internal: the
// agent, the coordinator, the outage simulator and fleetctl evaluate it; a
// user states a policy as a [messages.RetryConfig] in a job spec, and a Go
// handler returns the markers through package agent (agent.Permanent,
// agent.After, agent.Snooze).
//
// Nothing here reads the clock or owns a random source: callers pass the
// time and a [Rand]. The agent turns a [Decision] into NakWithDelay (retry,
// snooze) or into the step's on_failure (give up); the coordinator feeds item
// failures to a [Workflow]. The one thing that sleeps is [Backoff.Wait], on
// the clock.Clock it is given: a [Backoff] drives jetfleet's own retry loops
// (waiting for a bucket, a refused publish, a lost compare-and-set) with an
// [Exponential] policy's delays.
//
// # Delays
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
// then capped at max_delay, then jittered when jitter is on, then clamped to
// [0, max_delay]. Jitter modes: proportional (default) uniform in
// d·(1±jitter_factor); full uniform in [0, d]; equal d/2 + uniform [0, d/2];
// decorrelated min(cap, uniform [I, 3·previous delay]) — it replaces the
// strategy's delay, as in the AWS architecture blog. The arithmetic is capped
// before it can overflow: attempt 10,000 or math.MaxInt32 gives max_delay.
//
// Worked timelines (no jitter): exponential 1s → 1s 2s 4s 8s 16s 30s…;
// fibonacci 1s → 1s 1s 2s 3s 5s 8s; linear 1s + 2s → 1s 3s 5s 7s; custom
// [1s 3s 7s 15s] with max_delay 60s → 1s 3s 7s 15s 60s; fixed 5s with
// attempts 3 → 5s 5s (two retries).
//
// # Error matchers
//
// An empty retry_on retries every error. Otherwise an error retries when one
// of its matchers matches; a non-matching error is final for the step
// (reason not_retryable). The built-ins are case-insensitive, word-bounded
// regular expressions searched over [Failure.Text] (message, error and stderr
// tail):
//
//	name          matches
//	------------  ---------------------------------------------------------------
//	network       connection refused / reset / closed / aborted; use of closed
//	              network connection; no route to host; network or host
//	              (is) unreachable; broken pipe; unexpected EOF, or EOF after
//	              tcp / udp / unix / conn / connection / socket on the same line;
//	              DNS: no such host, temporary failure in name resolution, name
//	              or service not known, could not resolve host; TLS/SSL
//	              handshake errors, handshake failure; failed to connect;
//	              dial tcp / udp / unix; network error; ECONNREFUSED,
//	              ECONNRESET, ECONNABORTED, ENETUNREACH, EHOSTUNREACH, ENETDOWN,
//	              EPIPE
//	timeout       Failure.TimedOut (the step was killed by its timeout); exit
//	              code 124 (timeout(1)); timeout(s), timed out, time out,
//	              time-out, deadline exceeded (context, gRPC DeadlineExceeded),
//	              ETIMEDOUT
//	server_error  an HTTP 5xx status, never a bare number: "500 Internal
//	              Server Error", "502 Bad Gateway", "503 Service Unavailable",
//	              "504 Gateway Timeout" and the other 5xx reason phrases, with
//	              or without the code; "server error"; "HTTP/1.1 502";
//	              "status 503", "status code: 500", "status=500", "HTTP 502",
//	              "response code 500", "error code 500", "code 500"; "5xx";
//	              gRPC "code = Unavailable" / "code = Internal". Does not match
//	              "processed 1500 items" or "port 5000".
//	rate_limit    "429 Too Many Requests", "too many requests", "HTTP/1.1 429",
//	              "status 429" (after the same words as server_error, or got /
//	              received / returned), 429 alone on a line; rate limit,
//	              rate-limited, ratelimit(s|ed|ing|er); throttle, throttled,
//	              throttling (ThrottlingException); quota exceeded, exceeded
//	              … quota; slow down / SlowDown; resource exhausted
//	              (RESOURCE_EXHAUSTED)
//
// {pattern: regex} is a Go (RE2) regular expression searched over the same
// text, case-sensitive unless it starts with (?i); an invalid one is a
// configuration error. {exit_code: [codes]} matches the command's exit code.
//
// [Classify] names the error class recorded in attempts and dead letters: the
// first of timeout, rate_limit, server_error, network that matches, else
// "error". [Signature] hashes an error message normalised of numbers, ids,
// UUIDs, quoted strings, addresses and paths, to group errors in the DLQ and
// in error reports.
//
// # Decisions and the retry budget
//
// [Policy.Decide] takes the step's persisted [State], the failure and the
// current time, and returns retry after d, give up (reason attempts,
// retry_budget, not_retryable or permanent, with the last error wrapped in a
// [*GiveUpError]) or snooze d, with the updated State. The retry_budget bounds
// the cumulative backoff delay, not the run time: the step gives up when
// delay_spent + next_delay > budget, delay_spent being the sum of the delays
// granted so far (jittered as granted), persisted in the State so that it
// survives agent changes and restarts. Time plays no part in it: a 5s budget
// over exponential 1s base 2 grants 1s and 2s, then gives up before the
// third retry (1+2+4 > 5), however long the runs take.
//
// # Marker errors
//
// Go handlers steer retries by returning (through package agent, which
// re-exports them), possibly wrapped with %w:
// [Permanent](err) — give up now; [After](d, err) — retry after d (e.g.
// Retry-After), still an attempt and still spending the budget; [Snooze](d) —
// run again after d without spending an attempt or budget.
//
// # Workflow level
//
// [Workflow] evaluates a job's error_policy when an item fails: the item's
// action (dlq, retry, skip, stop, custom) and whether the job stops
// (first_failure, max_failures, failure_threshold after at least 10 finished
// items, item_failure_stop). [WorkflowPolicy] decides whole-item re-runs for
// on_item_failure: retry, [Collector] implements error_collection, and
// [Breaker] is the circuit breaker as a state machine over a serialisable
// [BreakerState], to be shared through KV with compare-and-set: the job's
// (error_policy.circuit_breaker), and a step's own ([Policy.Breaker],
// retry_config.circuit_breaker), while open the step fails fast.
//
// # The item's time
//
// [Deadline] is a job's agent_timeout for one item's run: a wall-clock bound
// from its first step run, which run time and delays both count toward
// (unlike retry_budget). [Policy.PlanWith] plans a timeline with runs of a
// given length under it, as the agent decides it.
package retry
