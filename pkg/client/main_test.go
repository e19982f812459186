package client

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain checks, once every test has ended, that none left a goroutine
// behind: the client's retries, dials and subscriptions end with their
// calls. Checked for the whole package rather than per test, so that the
// tests, which mostly wait on their servers, run side by side.
func TestMain(m *testing.M) {
	natstest.SetParallel(8)
	natstest.VerifyMain(m)
}
