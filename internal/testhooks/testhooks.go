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
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
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
	// Provision sizes the pool's work consumer when the agent creates it
	// because no coordinator has yet (tests with a short AckWait);
	// otherwise the coordinator's settings apply. Defaults to
	// provision's defaults.
	Provision provision.Config
}

// Coordinator holds a coordinator's hooks. The zero value is production
// behaviour. It is a plain value.
type Coordinator struct {
	// Clock defaults to the system clock. The lease runs on real time
	// whatever it is.
	Clock clock.Clock
}

var (
	updateAgent       func(cfg any, fn func(*Agent)) bool
	updateCoordinator func(cfg any, fn func(*Coordinator)) bool
)

// RegisterAgent is called once, by pkg/agent's init, with the function
// that applies fn to the hooks of an *agent.Config (false when cfg is
// not one).
func RegisterAgent(update func(cfg any, fn func(*Agent)) bool) { updateAgent = update }

// RegisterCoordinator is called once, by pkg/coordinator's init, with
// the function that applies fn to the hooks of a *coordinator.Config
// (false when cfg is not one).
func RegisterCoordinator(update func(cfg any, fn func(*Coordinator)) bool) {
	updateCoordinator = update
}

// WithAgent returns cfg, an agent.Config, with h as its hooks. It panics
// on any other type: a test's mistake.
func WithAgent[C any](cfg C, h Agent) C {
	UpdateAgent(&cfg, func(a *Agent) { *a = h })
	return cfg
}

// UpdateAgent applies fn to the hooks of *cfg, an agent.Config, in
// place. It panics on any other type.
func UpdateAgent[C any](cfg *C, fn func(*Agent)) {
	if updateAgent == nil || !updateAgent(cfg, fn) {
		panic(fmt.Sprintf("testhooks: UpdateAgent of %T, not an *agent.Config", cfg))
	}
}

// WithCoordinator returns cfg, a coordinator.Config, with h as its
// hooks. It panics on any other type: a test's mistake.
func WithCoordinator[C any](cfg C, h Coordinator) C {
	UpdateCoordinator(&cfg, func(c *Coordinator) { *c = h })
	return cfg
}

// UpdateCoordinator applies fn to the hooks of *cfg, a
// coordinator.Config, in place. It panics on any other type.
func UpdateCoordinator[C any](cfg *C, fn func(*Coordinator)) {
	if updateCoordinator == nil || !updateCoordinator(cfg, fn) {
		panic(fmt.Sprintf("testhooks: UpdateCoordinator of %T, not a *coordinator.Config", cfg))
	}
}
