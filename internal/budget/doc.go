// Package budget holds each job's retry budget in a NATS KV bucket and
// hands out retries from it, exactly, to any number of agents. The budget
// and its operator settings follow AD-44, the architecture decision on
// job-level retry budgets and best-effort completion that jetfleet
// implements.
//
// # Effective budget
//
// [Effective] turns a spec's retry_budget and retry_budget_per_item (a count
// or a percentage of the job's items, rounded up) and the operator's
// [Settings] (RETRY_BUDGET_DEFAULT, RETRY_BUDGET_MAX,
// RETRY_BUDGET_PER_ITEM_DEFAULT, RETRY_BUDGET_PER_ITEM_MAX, as environment
// variables via [SettingsFromEnv] or flags via [RegisterFlags]) into a
// [Record]: unset takes the default (out of the box max(20, 10% of items)
// for the job, no per-item cap), 0 means no retries, values above a maximum
// are clamped, a per-item value above the total is clamped to the total,
// and the record keeps what was requested and what clamped it.
//
// # The record in KV
//
// The coordinator stores the record at submission with [Budget.Create],
// which uses kv.Create so that a resubmitted job keeps its budget. The key
// is [Key](pool, job), <pool>.<job>, so that the server lets each pool's
// agents write their own pool's budgets only; a job whose items run in
// several pools has a record per pool holding its [Shares] of the total.
// The value is JSON:
//
//	{"total":20,"per_item_max":3,"consumed":7,"requested_total":"20",
//	 "requested_per_item":"3","clamped_by":"","exhausted":false,
//	 "recent_claims":[{"id":"Xk3v9Q.1a","units":4}, ...]}
//
// [Record.Status] maps it onto the budget block of a job status.
//
// # Claiming
//
// Every retry decision calls [Budget.Claim] before it naks, passing the
// retries the item has been granted so far (kept in the item's state). The
// per-item cap is checked first, then one unit is taken from the job's
// record by compare-and-set. A refusal is a [Grant] carrying a typed
// [Deny] (item_budget_exhausted or job_budget_exhausted, with consumed and
// limit); the item then fails like an exhausted one. Snoozes, breaker
// parking and crash redeliveries must not claim.
//
// Correctness rests on two things only: the per-item check, and the
// compare-and-set on the job key, which never writes consumed above total.
// The record lives in an internal/kvstate store, which keeps it cached
// (one watch of the bucket per process keeps it fresh and tells a process
// when others have exhausted a job), retries conflicts (API errors 10071
// and, on replicated buckets, 10164) and failed requests with jittered
// exponential backoff, and settles lost replies. Above it, the budget adds
// speed:
//
//   - Coalescing: concurrent claims on one job inside one process wait for a
//     single flush goroutine, which claims k units with one compare-and-set
//     and hands them out; if the record had only r < k left, r callers get
//     one and the rest are denied. A unit is handed out only once the KV has
//     acknowledged it.
//   - Exhaustion is remembered (a budget never refills): later denials cost
//     neither a read nor a write.
//
// A write whose acknowledgement is lost (a timeout at a leader change) is
// in doubt: its claim id is in the record it wrote (recent_claims keeps
// the last 16), and its units are credited, once, when a record read or
// watched carries the id. A unit that was recorded after its caller gave
// up is kept for the next claim on the job in this process, never granted
// twice. Units recorded but never handed out (a process that ends holding
// some) are lost to the job: the budget can be under-spent, never
// over-spent.
//
// # Replicated buckets
//
// KV's Get is a direct get there, which any replica answers, and a lagging
// one returns an older revision (measured: 19–43 of 300 reads right after an
// acknowledged write, on the lagging follower of a 3-node cluster). Build
// the Budget [WithJetStream] so that the reads behind compare-and-set go to
// the stream leader through $JS.API.STREAM.MSG.GET (0 stale reads measured).
//
// # Concurrency and lifecycle
//
// A [Budget] is safe for concurrent use; use one per process and Close it
// on shutdown (it waits for its goroutines). Call [Budget.Forget] when a
// job ends, to drop its state and its remaining-budget gauge. Metrics
// (with [WithRegisterer]): jetfleet_retry_budget_consumed_total,
// jetfleet_retry_budget_exhausted_total{scope}, jetfleet_retry_budget_claims_total{result}
// and jetfleet_retry_budget_remaining{job_id}.
package budget
