// Package seedcases holds the worked retry timelines of the documents
// jetfleet's retry semantics were specified from (listed, with how jetfleet
// differs from them, in docs/retries.md, "Differences from the source
// documents"): each example's configuration in jetfleet's field names, the
// numbers the document gives, and what jetfleet does. The same table is
// checked against the pure plan (internal/retry), `fleetctl backoff plan`, live
// redeliveries on an embedded server (internal/e2e) and the differences
// table of docs/retries.md.
package seedcases

import "time"

// The source documents, by the number they are filed under.
const (
	Seed000 = "000 Retry Budget"
	Seed001 = "001 Backoff Strategies"
	Seed002 = "002 Backoff Strategies (enhanced retry system)"
	Seed003 = "003 Workflow-Level vs Command-Level Retry"
)

// Differences, as named in the first column of the table in docs/retries.md.
const (
	DiffAttempts = "attempts counts the first run"
	DiffMaxDelay = "max_delay caps every delay"
)

// Timeline is one worked example of a source document. It is a plain value.
type Timeline struct {
	// Seed is the source document (Seed000, ...) and Example the example's
	// name there.
	Seed, Example string
	// Config is the example's retry_config, YAML, in jetfleet's fields.
	Config string
	// RunTime is how long each run takes before it fails (0: at once), and
	// AgentTimeout the job's agent_timeout (0: none).
	RunTime, AgentTimeout time.Duration
	// SeedDelays are the delays before each retry as the document gives
	// them.
	SeedDelays []time.Duration
	// Delays are jetfleet's, and StoppedBy what ends its retries
	// (attempts, retry_budget, agent_timeout).
	Delays    []time.Duration
	StoppedBy string
	// Difference names the row of docs/retries.md that explains why
	// Delays differ from SeedDelays; "" when they do not.
	Difference string
}

// Name is "<seed>: <example>", for test names.
func (t Timeline) Name() string { return t.Seed + ": " + t.Example }

func secs(ss ...float64) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s * float64(time.Second))
	}
	return out
}

// Timelines are every worked timeline of the source documents.
func Timelines() []Timeline {
	return []Timeline{
		{
			Seed: Seed000, Example: "Example 1: budget limits before attempts",
			Config:     "attempts: 100\nretry_budget: 2m\nbackoff: {exponential: {base: 2.0}}\ninitial_delay: 1s\n",
			SeedDelays: secs(1, 2, 4, 8, 16, 32), // "1s, 2s, 4s, 8s, 16s, 32s, 64s...": 64 would pass 2m
			Delays:     secs(1, 2, 4, 8, 16, 30, 30), StoppedBy: "retry_budget",
			Difference: DiffMaxDelay,
		},
		{
			Seed: Seed000, Example: "Example 2: attempts limit before budget",
			Config:     "attempts: 3\nretry_budget: 10m\nbackoff: fixed\ninitial_delay: 5s\n",
			SeedDelays: secs(5, 5, 5), // "5s + 5s + 5s = 15 seconds"
			Delays:     secs(5, 5), StoppedBy: "attempts",
			Difference: DiffAttempts,
		},
		{
			Seed: Seed000, Example: "Example timeline: 30s runs, retry_budget 5s fails at the third retry",
			Config:     "attempts: 10\nretry_budget: 5s\nbackoff: {exponential: {base: 2.0}}\ninitial_delay: 1s\n",
			RunTime:    30 * time.Second,
			SeedDelays: secs(1, 2), // "would fail at the third retry (1+2+4 = 7s > 5s budget)"
			Delays:     secs(1, 2), StoppedBy: "retry_budget",
		},
		{
			Seed: Seed001, Example: "Fixed backoff",
			Config:     "attempts: 4\nbackoff: fixed\ninitial_delay: 2s\n",
			SeedDelays: secs(2, 2, 2),
			Delays:     secs(2, 2, 2), StoppedBy: "attempts",
		},
		{
			Seed: Seed001, Example: "Linear backoff",
			Config:     "attempts: 4\nbackoff: {linear: {increment: 2s}}\ninitial_delay: 1s\n",
			SeedDelays: secs(1, 3, 5),
			Delays:     secs(1, 3, 5), StoppedBy: "attempts",
		},
		{
			Seed: Seed001, Example: "Exponential backoff (default)",
			Config:     "attempts: 6\nbackoff: {exponential: {base: 2.0}}\ninitial_delay: 1s\n",
			SeedDelays: secs(1, 2, 4, 8, 16),
			Delays:     secs(1, 2, 4, 8, 16), StoppedBy: "attempts",
		},
		{
			Seed: Seed001, Example: "Fibonacci backoff",
			Config:     "attempts: 7\nbackoff: fibonacci\ninitial_delay: 1s\n",
			SeedDelays: secs(1, 1, 2, 3, 5, 8),
			Delays:     secs(1, 1, 2, 3, 5, 8), StoppedBy: "attempts",
		},
		{
			Seed: Seed001, Example: "Custom backoff: max_delay past the list",
			Config:     "attempts: 7\nbackoff: {custom: {delays: [500ms, 1s, 2s, 5s, 10s]}}\n",
			SeedDelays: secs(0.5, 1, 2, 5, 10, 30), // "Retry 6+: max_delay"
			Delays:     secs(0.5, 1, 2, 5, 10, 30), StoppedBy: "attempts",
		},
		{
			Seed: Seed001, Example: "Timeout interaction: agent timeout 300s, 5 retries, fibonacci from 10s",
			Config:       "attempts: 6\nbackoff: fibonacci\ninitial_delay: 10s\n",
			AgentTimeout: 300 * time.Second,
			SeedDelays:   secs(10, 10, 20, 30, 50), // "120s of retries, leaving 180s for actual work"
			Delays:       secs(10, 10, 20, 30, 30), StoppedBy: "attempts",
			Difference: DiffMaxDelay,
		},
		{
			// Not a number the document gives: its timeout example with runs,
			// to show where the timeout ends the retries.
			Seed: Seed001, Example: "Timeout interaction, with 40s runs",
			Config:       "attempts: 6\nbackoff: fibonacci\ninitial_delay: 10s\n",
			RunTime:      40 * time.Second,
			AgentTimeout: 300 * time.Second,
			SeedDelays:   secs(10, 10, 20, 30),
			Delays:       secs(10, 10, 20, 30), StoppedBy: "agent_timeout",
		},
		{
			Seed: Seed002, Example: "Linear backoff timeline",
			Config:     "attempts: 5\nbackoff: {linear: {increment: 2s}}\ninitial_delay: 1s\n",
			SeedDelays: secs(1, 3, 5, 7),
			Delays:     secs(1, 3, 5, 7), StoppedBy: "attempts",
		},
		{
			Seed: Seed002, Example: "Exponential backoff timeline",
			Config:     "attempts: 5\ninitial_delay: 1s\nmax_delay: 60s\n",
			SeedDelays: secs(1, 2, 4, 8, 16),
			Delays:     secs(1, 2, 4, 8), StoppedBy: "attempts",
			Difference: DiffAttempts,
		},
		{
			Seed: Seed002, Example: "Fibonacci backoff timeline",
			Config:     "attempts: 6\ninitial_delay: 1s\nmax_delay: 30s\nbackoff: fibonacci\n",
			SeedDelays: secs(1, 1, 2, 3, 5, 8),
			Delays:     secs(1, 1, 2, 3, 5), StoppedBy: "attempts",
			Difference: DiffAttempts,
		},
		{
			Seed: Seed002, Example: "Custom backoff timeline",
			Config:     "attempts: 5\nmax_delay: 60s\nbackoff: {custom: {delays: [{secs: 1, nanos: 0}, {secs: 3, nanos: 0}, {secs: 7, nanos: 0}, {secs: 15, nanos: 0}]}}\n",
			SeedDelays: secs(1, 3, 7, 15, 60), // "Attempt 5: 60s (max_delay, delays[4] doesn't exist)"
			Delays:     secs(1, 3, 7, 15), StoppedBy: "attempts",
			Difference: DiffAttempts,
		},
		{
			Seed: Seed003, Example: "Both systems: the command retries (attempt 2, 3) with exponential backoff",
			Config:     "attempts: 3\nbackoff: exponential\ninitial_delay: 1s\nmax_delay: 30s\n",
			SeedDelays: secs(1, 2),
			Delays:     secs(1, 2), StoppedBy: "attempts",
		},
	}
}
