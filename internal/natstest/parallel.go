package natstest

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// SetParallel makes n the default of -test.parallel, how many of a test
// binary's parallel tests run at once, unless the command line sets it; the
// race detector, which multiplies the CPU every test needs, keeps Go's
// default (GOMAXPROCS). Call it from TestMain before m.Run.
//
// Tests that each run on their own embedded server spend most of their
// time waiting on it (AckWait, a lease's TTL, a poll, a restart), not on
// the CPU: at GOMAXPROCS, 2 on the CI machine, such a package takes
// minutes of wall clock for seconds of CPU (docs/benchmarks.md, "`go test
// ./...`: the slowest tests").
func SetParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return
	}
	if raceEnabled {
		n = runtime.GOMAXPROCS(0)
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic(err)
	}
}

// MainParallel is a TestMain that runs the package's tests with n of its
// parallel tests at once (SetParallel), and exits with their outcome.
func MainParallel(m *testing.M, n int) {
	SetParallel(n)
	os.Exit(m.Run())
}
