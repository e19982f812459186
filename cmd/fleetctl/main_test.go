package main

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain runs eight of the parallel tests at once: each runs its own
// embedded fleet or server and mostly waits on it. The simulator's
// agreement with a live fleet, which times calls against outage edges,
// does not call t.Parallel and runs alone.
func TestMain(m *testing.M) {
	natstest.MainParallel(m, 8)
}
