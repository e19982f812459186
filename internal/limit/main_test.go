package limit_test

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain runs the package's four limiter tests side by side (each on its
// own server, each mostly waiting out its 20 ms calls), not two at a time.
func TestMain(m *testing.M) {
	natstest.MainParallel(m, 8)
}
