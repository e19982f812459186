package shell

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// envReapMode runs the test binary as a helper process with the subreaper
// in the named mode ("steps" or "all"): TestReap* start it so that the
// process-wide mode of one test does not change the others'.
const envReapMode = "JETFLEET_SHELL_TEST_REAP"

// TestMain makes the test process a child subreaper reaping step
// processes, as an embedded agent would (ReapSteps: the tests' own child
// processes are left to os/exec), then checks for goroutine leaks.
func TestMain(m *testing.M) {
	mode := ReapSteps
	if os.Getenv(envReapMode) == "all" {
		mode = ReapAll
	}
	stop := func() {}
	if runtime.GOOS == "linux" {
		if err := EnableSubreaper(mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); Reap(ctx) }()
		stop = func() { cancel(); <-done }
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
