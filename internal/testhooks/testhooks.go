// Package testhooks sets what the public configs of pkg/agent and
// pkg/coordinator keep unexported: the clock and random source tests
// inject, and the points where a test stops an agent as if it had died.
// It lives under internal/ so that a user's go doc of agent.Config and
// coordinator.Config shows none of it; the repo's tests (in-package,
// internal/e2e, internal/auth) reach it here.
//
//	cfg := testhooks.WithAgent(agent.Config{Name: "a1"}, testhooks.Agent{Clock: clk})
//
// pkg/agent and pkg/coordinator register the setters from their init, so
// importing either is enough for WithAgent or WithCoordinator to work.
package testhooks

import (
	"fmt"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// Agent holds an agent's hooks. The zero value is production behaviour.
// It is a plain value.
type Agent struct {
	// Clock defaults to the system clock.
	Clock clock.Clock
	// Rand defaults to a seeded source.
	Rand retry.Rand
	// AfterDeadLetter, when set, is called once an item's DLQ entry is
	// stored, before its result and Term. Returning false stops handling
	// the item there, as if the agent had died: the message is neither
	// acked nor naked and comes back after AckWait.
	AfterDeadLetter func(jobID, itemID string) bool
	// AfterPark, when set, is called once a parked copy is scheduled,
	// before the delivery is acked. Returning false stops there, as if the
	// agent had died between the two.
	AfterPark func(jobID, itemID string) bool
}

// Coordinator holds a coordinator's hooks. The zero value is production
// behaviour. It is a plain value.
type Coordinator struct {
	// Clock defaults to the system clock. The lease runs on real time
	// whatever it is.
	Clock clock.Clock
}

var (
	setAgent       func(cfg any, h Agent) bool
	setCoordinator func(cfg any, h Coordinator) bool
)

// RegisterAgent is called once, by pkg/agent's init, with the function
// that sets h on an *agent.Config (false when cfg is not one).
func RegisterAgent(set func(cfg any, h Agent) bool) { setAgent = set }

// RegisterCoordinator is called once, by pkg/coordinator's init, with
// the function that sets h on a *coordinator.Config (false when cfg is
// not one).
func RegisterCoordinator(set func(cfg any, h Coordinator) bool) { setCoordinator = set }

// WithAgent returns cfg, an agent.Config, with h as its hooks. It panics
// on any other type: a test's mistake.
func WithAgent[C any](cfg C, h Agent) C {
	if setAgent == nil || !setAgent(&cfg, h) {
		panic(fmt.Sprintf("testhooks: WithAgent of %T, not an agent.Config", cfg))
	}
	return cfg
}

// WithCoordinator returns cfg, a coordinator.Config, with h as its
// hooks. It panics on any other type: a test's mistake.
func WithCoordinator[C any](cfg C, h Coordinator) C {
	if setCoordinator == nil || !setCoordinator(&cfg, h) {
		panic(fmt.Sprintf("testhooks: WithCoordinator of %T, not a coordinator.Config", cfg))
	}
	return cfg
}
