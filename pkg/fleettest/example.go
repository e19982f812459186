package fleettest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// ExampleTB stands in for a test's *testing.T in a runnable example, which
// has none, so that an example calls RunFleet, RunServer and the other
// helpers as a test would:
//
//	func ExampleShout() {
//		t := fleettest.NewExampleTB() // in a test: the test's *testing.T
//		defer t.Close()
//		f := fleettest.RunFleet(t, handlers)
//		...
//	}
//
// Cleanup registers functions that Close runs, last first, after the
// Context is cancelled; Fatal, Fatalf, FailNow, Error and Errorf panic with
// their message (an example has no test to fail); Log and Logf print
// nothing, so that the example's output is its own; TempDir makes a
// directory that Close removes. Any other testing.TB method panics. In a
// test, pass the test's *testing.T instead.
type ExampleTB interface {
	testing.TB
	// Close cancels the Context and runs the functions given to Cleanup,
	// the last registered first.
	Close()
}

// exampleTB is the ExampleTB NewExampleTB returns.
type exampleTB struct {
	// TB is nil: it only makes exampleTB a testing.TB, and the methods
	// below are those the helpers call.
	testing.TB

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cleanups []func()
}

// NewExampleTB returns an ExampleTB; call Close when the example ends.
func NewExampleTB() ExampleTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleTB{ctx: ctx, cancel: cancel}
}

// Close cancels the Context and runs the functions given to Cleanup, the
// last registered first.
func (t *exampleTB) Close() {
	t.cancel()
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}

// Cleanup registers f for Close.
func (t *exampleTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// Context is cancelled when Close begins.
func (t *exampleTB) Context() context.Context { return t.ctx }

// Name is "Example".
func (t *exampleTB) Name() string { return "Example" }

// Helper does nothing.
func (t *exampleTB) Helper() {}

// Failed is false: a failure panics.
func (t *exampleTB) Failed() bool { return false }

// Log prints nothing.
func (t *exampleTB) Log(...any) {}

// Logf prints nothing.
func (t *exampleTB) Logf(string, ...any) {}

// Error panics with its message.
func (t *exampleTB) Error(args ...any) { panic(fmt.Sprint(args...)) }

// Errorf panics with its message.
func (t *exampleTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Fatal panics with its message.
func (t *exampleTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// Fatalf panics with its message.
func (t *exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// FailNow panics.
func (t *exampleTB) FailNow() { panic("fleettest: example failed") }

// TempDir makes a new directory that Close removes.
func (t *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "fleettest-example-")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
