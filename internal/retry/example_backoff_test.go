package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
)

// instantClock fires at once: the example shows the waits without making them.
type instantClock struct{}

// Now is the zero time: a Backoff only waits.
func (instantClock) Now() time.Time { return time.Time{} }

func (instantClock) After(d time.Duration) <-chan time.Time {
	fmt.Println("wait", d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// A loop that waits for something to come up: delays double from 100ms up
// to 2s until the try succeeds or the context ends.
func ExampleBackoff() {
	errNotYet := errors.New("not there yet")
	tries := 0
	try := func() error {
		if tries++; tries < 7 {
			return errNotYet
		}
		return nil
	}
	b := retry.NewBackoff(retry.Exponential(100*time.Millisecond, 2*time.Second), nil, instantClock{})
	for try() != nil {
		if err := b.Wait(context.Background()); err != nil {
			return
		}
	}
	fmt.Println("up after", b.Retries(), "retries")
	// Output:
	// wait 100ms
	// wait 200ms
	// wait 400ms
	// wait 800ms
	// wait 1.6s
	// wait 2s
	// up after 6 retries
}
