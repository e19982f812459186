package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// A policy from the same settings a job spec's retry_config takes: its
// delays, and the timeline they add up to.
func ExamplePolicy_Plan() {
	attempts := 5
	p, err := retry.NewPolicy(&messages.RetryConfig{
		Attempts:     &attempts,
		InitialDelay: new(messages.MustDuration("500ms")),
		MaxDelay:     new(messages.MustDuration("3s")),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p)
	for n := 1; n < p.Attempts(); n++ {
		fmt.Printf("after attempt %d: %s\n", n, p.Delay(n, 0, nil))
	}
	plan := p.Plan()
	fmt.Println(plan.Delays, plan.Total, plan.StoppedBy)
	// Output:
	// exponential base 2, initial 500ms, max 3s, 5 attempts, no jitter
	// after attempt 1: 500ms
	// after attempt 2: 1s
	// after attempt 3: 2s
	// after attempt 4: 3s
	// [500ms 1s 2s 3s] 6.5s attempts
}

// Jitter draws from the Rand it is given: a seeded one repeats its delays.
func ExamplePolicy_Delay() {
	p, err := retry.NewPolicy(&messages.RetryConfig{JitterMode: messages.JitterFull})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, b := retry.NewRand(7), retry.NewRand(7)
	var prev time.Duration
	for n := 1; n < p.Attempts(); n++ {
		d := p.Delay(n, prev, a)
		fmt.Println(d <= p.Plan().Delays[n-1], d == p.Delay(n, prev, b))
		prev = d
	}
	// Output:
	// true true
	// true true
}

// Only the errors retry_on names are retried; the markers override it.
func ExamplePolicy_Retryable() {
	p, err := retry.NewPolicy(&messages.RetryConfig{
		RetryOn: []messages.Matcher{{Builtin: messages.MatchNetwork}, {Builtin: messages.MatchRateLimit}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	refused := errors.New("dial tcp 10.0.0.7:443: connect: connection refused")
	for _, err := range []error{
		refused,
		errors.New("invalid image header"),
		retry.Permanent(refused),
		retry.After(30*time.Second, errors.New("quota check")),
		fmt.Errorf("upload: %w", errors.New("429 Too Many Requests")),
	} {
		fmt.Printf("%-13s %-5v %s\n", retry.Classify(err), p.Retryable(err), err)
	}
	// Output:
	// network       true  dial tcp 10.0.0.7:443: connect: connection refused
	// error         false invalid image header
	// network       false dial tcp 10.0.0.7:443: connect: connection refused
	// error         true  quota check
	// rate_limit    true  upload: 429 Too Many Requests
}

// A handler steers its retries with marker errors; wrapping keeps them.
func ExampleAfter() {
	err := fmt.Errorf("fetch: %w", retry.After(90*time.Second, errors.New("503 Service Unavailable")))
	d, ok := retry.AfterDelay(err)
	fmt.Println(d, ok, retry.IsPermanent(err))

	_, ok = retry.SnoozeDelay(err)
	fmt.Println(ok)
	d, ok = retry.SnoozeDelay(retry.Snooze(time.Minute))
	fmt.Println(d, ok)
	// Output:
	// 1m30s true false
	// false
	// 1m0s true
}

// A bad retry_config names each bad field.
func ExampleNewPolicy() {
	zero := 0
	_, err := retry.NewPolicy(&messages.RetryConfig{
		Attempts: &zero,
		RetryOn:  []messages.Matcher{{Pattern: "conn(refused"}},
	})
	fmt.Println(errors.Is(err, retry.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// true
	// retry: invalid config: attempts: must be in [1, 10000], got 0; retry_on[0].pattern: invalid regex: error parsing regexp: missing closing ): `conn(refused`
}
