package messages

import "time"

// AgentPresence is an agent's value in the agents bucket: who it is, what
// it pulls and how busy it is. Each agent rewrites it every presence
// interval and deletes it when it stops; the bucket's max age removes the
// key of an agent that died.
type AgentPresence struct {
	// V is the schema version (docs/contract.md §8).
	V    Schema `json:"v"`
	Name string `json:"name"`
	Pool string `json:"pool"`
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// Concurrency is how many items the agent runs at once.
	Concurrency int `json:"concurrency"`
	// InFlight is how many items it is running now, and Jobs how many of
	// them belong to each job (the 20 busiest jobs).
	InFlight int64            `json:"in_flight"`
	Jobs     map[string]int64 `json:"jobs,omitempty"`
	// Finished counts the deliveries it handled since it started.
	Finished int64 `json:"finished"`
	// Failed counts the items it gave up on: dead-lettered, or failed
	// under a policy that keeps no dead letter.
	Failed    int64     `json:"failed"`
	StartedAt time.Time `json:"started_at"`
	// LastSeen is when the agent wrote this value; Interval is how often
	// it does, so a reader can tell a silent agent from a live one.
	LastSeen time.Time `json:"last_seen"`
	Interval Duration  `json:"interval"`
	// Stopping is set by an agent that is shutting down.
	Stopping bool `json:"stopping,omitempty"`
	// Handlers are the names of the Go handlers the agent registered,
	// sorted. The coordinator refuses a job whose steps name a handler
	// that no present agent of the pool registers.
	Handlers []string `json:"handlers,omitempty"`
	// Capabilities are the kinds of step the agent runs besides shell and
	// its handlers: CapabilityClaude when it has Claude Code's CLI, and
	// the step kinds of its release (write_file, foreach, handlers).
	// The coordinator refuses a job using one when no present agent of its
	// pool has it.
	Capabilities []string `json:"capabilities,omitempty"`
	// Version is the agent's build ("v0.4.0 (commit …, go1.26.8)" as
	// `agent --version` prints it); empty from agents before v0.4.0.
	Version string `json:"version,omitempty"`
}

// Capabilities an agent announces: CapabilityClaude when it runs claude
// steps (it has Claude Code's CLI); CapabilityWriteFile and
// CapabilityForeach for those step kinds, CapabilityHandlers for
// on_exit_code handlers, fallbacks with fail_workflow and fallbacks of
// several steps (agents before v0.4.0 announce none of them), and
// CapabilityFallbackRuns for fallbacks that rerun their step
// (OnFailure.MaxAttempts) or have a timeout of their own (older agents
// would ignore both).
const (
	CapabilityClaude       = "claude"
	CapabilityWriteFile    = "write_file"
	CapabilityForeach      = "foreach"
	CapabilityHandlers     = "handlers"
	CapabilityFallbackRuns = "fallback_runs"
)

// AgentStats is the data of an agent's status endpoint in its micro
// service's stats (`nats micro stats jetfleet-agent`): its counters since
// it started.
type AgentStats struct {
	Pool        string `json:"pool"`
	Concurrency int    `json:"concurrency"`
	// InFlight is how many items it runs now.
	InFlight int64 `json:"in_flight"`
	// ItemsRun counts the deliveries it handled; Failures the items it
	// gave up on (AgentPresence.Failed).
	ItemsRun int64 `json:"items_run"`
	Failures int64 `json:"failures"`
}

// UnreachableAfter is how many of its presence intervals an agent may go
// without a presence write stored at the hub before status calls it
// unreachable.
const UnreachableAfter = 3

// UnreachableAgent is an agent of a job's pool the hub has not heard from
// for UnreachableAfter of its presence intervals: it stopped without
// saying so, or its link to the hub is down (an agent behind a leaf node,
// docs/deploy.md "Agents at other sites"). Such an agent may hold results
// it reports once it is reachable again.
type UnreachableAgent struct {
	Name string `json:"name"`
	// Since is when the hub stored its last presence.
	Since time.Time `json:"since"`
}
