package natstest

import (
	"testing"
	"time"
)

// PollInterval is how often WaitFor re-checks its condition.
const PollInterval = 20 * time.Millisecond

// WaitFor calls cond every PollInterval until it returns nil, and fails the
// test with cond's last error if that does not happen within timeout. Call
// it from the test's goroutine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("fleettest: condition not met after %v: %v", timeout, err)
	}
}

// poll is WaitFor returning the last error instead of failing a test.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(PollInterval)
	}
}
