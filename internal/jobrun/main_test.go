package jobrun

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain runs eight of the parallel tests at once: each starts its own
// server and mostly waits on it. The tests that bound a request's time,
// measure the heap, check for leaked goroutines or set a package variable
// do not call t.Parallel and run alone.
func TestMain(m *testing.M) {
	natstest.MainParallel(m, 8)
}
