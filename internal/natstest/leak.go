package natstest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// IgnoreServerGoroutines is the goleak option for what an embedded server
// leaves behind after Shutdown on purpose: a stream with a source (the
// work stream sources the park stream) keeps a goroutine that waits up to
// 30 s to set up its source consumer, and it ends on its own.
func IgnoreServerGoroutines() goleak.Option {
	return goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3")
}

// ignoreOrphanedStore is what VerifyNoLeaks also allows: a clustered
// server that shuts down while it creates a stream's replica can leave
// that replica's file store open, and its state flusher and its
// registration with the access-time service never end (seen once in a
// 3-node cluster test, still there 15 s after every server had stopped).
// Both goroutines are the server's own; a server a test forgot to shut
// down still shows by its accept loops and connections.
func ignoreOrphanedStore() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	}
}

// leakWait bounds how long VerifyNoLeaks waits for goroutines to end.
const leakWait = 15 * time.Second

// VerifyNoLeaks registers a check, run with t's cleanups (register it
// first, so that it runs last), that no goroutine started during the test
// outlives it, beyond what IgnoreServerGoroutines and opts allow. Servers
// stop some goroutines of their own after Shutdown returns (a stream's
// state flusher, the access-time service), which on a loaded machine can
// take longer than goleak's own retries: the check waits up to leakWait
// for them before it fails.
func VerifyNoLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append([]goleak.Option{goleak.IgnoreCurrent()}, opts...)
	t.Cleanup(func() {
		if err := findLeaks(opts...); err != nil {
			t.Error(err)
		}
	})
}

// findLeaks waits up to leakWait for the goroutines opts (and what
// IgnoreServerGoroutines and ignoreOrphanedStore allow) do not ignore to
// end, and returns goleak's report of those still running.
func findLeaks(opts ...goleak.Option) error {
	opts = append(append([]goleak.Option{IgnoreServerGoroutines()}, ignoreOrphanedStore()...), opts...)
	deadline := time.Now().Add(leakWait)
	for goleak.Find(opts...) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	return goleak.Find(opts...)
}

// VerifyMain runs m's tests and then checks, as VerifyNoLeaks does for one
// test, that no goroutine outlives them; it exits with the tests' code, or
// 1 for a leak. It is VerifyNoLeaks for a whole package, whose tests can
// then run in parallel: a per-test check sees its neighbours' goroutines.
// A leak fails the package without naming the test.
func VerifyMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the package's tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
