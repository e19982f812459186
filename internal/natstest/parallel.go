package natstest

import (
	"flag"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// SetParallel makes n the default of -test.parallel, how many of a test
// binary's parallel tests run at once, unless the command line sets it;
// under the race detector, which multiplies the CPU every test needs, at
// most twice GOMAXPROCS (raceParallel). Call it from TestMain before m.Run.
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
		n = min(n, raceParallel*runtime.GOMAXPROCS(0))
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic(err)
	}
}

// raceParallel is how many parallel tests per GOMAXPROCS a binary built
// with the race detector runs at once. Even there the fleets mostly wait:
// internal/e2e under -race on 2 cores took 250 s with 2 at once and 172 s
// with 4, using 1.1 cores of CPU (185 CPU-s); 8 at once gained nothing more
// (167 s) and doubled the longest tests.
const raceParallel = 2

// MainParallel is a TestMain that runs the package's tests with n of its
// parallel tests at once (SetParallel) and a lazier garbage collector
// (testGCPercent), and exits with their outcome.
func MainParallel(m *testing.M, n int) {
	SetParallel(n)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(testGCPercent)
	}
	os.Exit(m.Run())
}

// testGCPercent is the GOGC MainParallel runs a package's tests with, unless
// the environment sets GOGC. A package of parallel fleets (servers,
// coordinators, agents in one process) allocates fast and keeps a modest
// heap: at Go's default of 100 the collector took a tenth of internal/e2e's
// CPU time, and 300 saved 9 of its 78 CPU-seconds of user time. A test that
// bounds the heap sets its own percent (debug.SetGCPercent) while it runs.
const testGCPercent = 300
