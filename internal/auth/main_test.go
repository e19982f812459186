package auth_test

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain runs eight of the package's parallel tests at once (GOMAXPROCS
// under the race detector). Each runs on its own embedded server, and most
// of their time is spent waiting on the server and the daemons, not on the
// CPU. TestIntakeCannotBeJammed and TestLimitSharesArePerPool time what
// they measure and do not call t.Parallel: they run alone.
func TestMain(m *testing.M) {
	natstest.MainParallel(m, 8)
}
