package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func ptr[T any](v T) *T { return &v }

// The fibonacci timeline of docs/contract.md §4: I·fib(n), fib = 1, 1, 2, 3, 5, 8.
func ExamplePolicy_Delay() {
	p, err := retry.NewPolicy(&messages.RetryConfig{
		Attempts:     ptr(7),
		Backoff:      &messages.Backoff{Kind: messages.BackoffFibonacci},
		InitialDelay: ptr(messages.MustDuration("1s")),
	})
	if err != nil {
		panic(err)
	}
	for n := 1; n < p.Attempts(); n++ {
		fmt.Printf("retry %d after %s\n", n, p.Delay(n, 0, nil))
	}
	// Output:
	// retry 1 after 1s
	// retry 2 after 1s
	// retry 3 after 2s
	// retry 4 after 3s
	// retry 5 after 5s
	// retry 6 after 8s
}

// A 5s retry budget over exponential 1s base 2: 1s and 2s are granted, the
// third retry (1+2+4 > 5) is not, and the last error is kept.
func ExamplePolicy_Decide() {
	p, err := retry.NewPolicy(&messages.RetryConfig{
		Attempts:    ptr(10),
		RetryBudget: ptr(messages.MustDuration("5s")),
	})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var st retry.State // persisted in the item's state between attempts
	for attempt := 1; ; attempt++ {
		lastErr := fmt.Errorf("attempt %d: connection refused", attempt)
		d := p.Decide(now, st, retry.Failure{Err: lastErr}, nil)
		if d.Action == retry.ActionGiveUp {
			fmt.Println(d.Action, d.Reason, errors.Is(d.Err, lastErr), errors.Is(d.Err, retry.ErrBudgetExhausted))
			fmt.Println(d.Err)
			break
		}
		fmt.Println(d.Action, d.Delay, "class", d.Class)
		st, now = d.State, now.Add(d.Delay)
	}
	// Output:
	// retry 1s class network
	// retry 2s class network
	// give_up retry_budget true true
	// retry: retry budget exhausted after 3 attempts: attempt 3: connection refused
}

// Go handlers steer retries with marker errors, also through %w wrapping.
func ExampleAfter() {
	p, _ := retry.NewPolicy(nil)
	now := time.Now()
	fail := func(err error) retry.Decision { return p.Decide(now, retry.State{}, retry.Failure{Err: err}, nil) }

	d := fail(fmt.Errorf("fetch: %w", retry.After(90*time.Second, errors.New("429 Too Many Requests"))))
	fmt.Println(d.Action, d.Delay, d.State.Attempts)
	d = fail(retry.Snooze(10 * time.Second))
	fmt.Println(d.Action, d.Delay, d.State.Attempts)
	d = fail(fmt.Errorf("upload: %w", retry.Permanent(errors.New("invalid credentials"))))
	fmt.Println(d.Action, d.Reason, d.State.Attempts)
	// Output:
	// retry 1m30s 1
	// snooze 10s 0
	// give_up permanent 1
}

func ExampleClassify() {
	for _, msg := range []string{
		"dial tcp 10.0.0.7:443: connect: connection refused",
		"HTTP/1.1 503 Service Unavailable",
		"processed 1500 items, then: invalid record",
		"429 Too Many Requests",
	} {
		fmt.Println(retry.Classify(retry.Failure{Message: msg}))
	}
	fmt.Println(retry.Classify(retry.Failure{TimedOut: true}))
	// Output:
	// network
	// server_error
	// error
	// rate_limit
	// timeout
}

func ExampleBreaker() {
	b, _ := retry.NewBreaker(&messages.CircuitBreakerConfig{FailureThreshold: 2, HalfOpenRequests: 1, SuccessThreshold: 1,
		Timeout: messages.MustDuration("30s")})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var st retry.BreakerState // shared by the fleet through KV
	st = b.OnFailure(now, st)
	st = b.OnFailure(now, st)
	_, ok, retryAt := b.Admit(now.Add(10*time.Second), st)
	fmt.Println(st.State, ok, retryAt.Sub(now))
	st, ok, _ = b.Admit(now.Add(30*time.Second), st)
	fmt.Println(st.State, ok)
	_, ok, _ = b.Admit(now.Add(30*time.Second), st)
	fmt.Println("second probe admitted:", ok)
	st = b.OnSuccess(now.Add(31*time.Second), st)
	fmt.Println(st.State)
	// Output:
	// open false 30s
	// half_open true
	// second probe admitted: false
	// closed
}

func ExampleSignature() {
	a := retry.Signature("open /tmp/a/1.txt: no such file")
	b := retry.Signature("open /var/b.txt: no such file")
	c := retry.Signature("permission denied")
	fmt.Println(a == b, a == c, len(a))
	fmt.Println(retry.Normalize(`GET "http://api/v1/items/42" from 10.0.0.1:5312: status 503`))
	// Output:
	// true false 16
	// get <q> from <ip>: status <n>
}
