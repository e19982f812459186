package e2e

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// parallelTests is how many of the package's parallel tests run at once
// unless -parallel says otherwise. Each runs on its own embedded server or
// cluster, and most of their time is spent waiting (AckWait, a lease's
// TTL, a killed process's restart, a schedule's tick), not on the CPU: at
// the default, GOMAXPROCS (2 on the CI machine), the package took most of
// `go test ./...`'s wall clock with the cores idle most of it
// (docs/benchmarks.md, "go test ./...: the slowest tests"). The tests
// that measure rates, shares or fault timings do not call t.Parallel and
// still run alone. Under the race detector, which multiplies the CPU the
// tests need, Go's default: with 4 at once under -race the fault tests'
// bounds on status answers (7–10 s) were missed on a 2-core machine.
func parallelTests() int {
	if raceEnabled {
		return runtime.GOMAXPROCS(0)
	}
	return 8
}

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(parallelTests())); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
