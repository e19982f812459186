package e2e

import (
	"testing"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// TestMain runs eight of the package's parallel tests at once (GOMAXPROCS
// under the race detector: with 4 at once under -race the fault tests'
// bounds on status answers, 7–10 s, were missed on a 2-core machine). Each
// runs on its own embedded server or cluster, and most of their time is
// spent waiting (AckWait, a lease's TTL, a killed process's restart, a
// schedule's tick), not on the CPU: at the default, GOMAXPROCS (2 on the
// CI machine), the package took most of `go test ./...`'s wall clock with
// the cores idle most of it (docs/benchmarks.md, "go test ./...: the
// slowest tests"). The tests that measure rates, shares or fault timings
// do not call t.Parallel and still run alone.
func TestMain(m *testing.M) {
	natstest.MainParallel(m, 8)
}
