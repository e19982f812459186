package retry

import (
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrInvalidConfig is wrapped by every error of [NewPolicy]; the error
// lists each problem with its field ("retry_on[2].pattern").
var ErrInvalidConfig = retry.ErrInvalidConfig

// Policy is a compiled retry_config: backoff strategy, jitter, error
// matchers and the number of attempts, with every default applied. It
// computes and never sleeps. A Policy is immutable and safe for
// concurrent use.
type Policy struct{ p *retry.Policy }

// NewPolicy compiles cfg (nil: every default — 3 attempts, exponential
// backoff base 2 from 1s capped at 30s, no jitter, every error retried).
// An invalid cfg gives an error wrapping [ErrInvalidConfig] that names
// every bad field.
func NewPolicy(cfg *messages.RetryConfig) (*Policy, error) {
	p, err := retry.NewPolicy(cfg)
	if err != nil {
		return nil, err
	}
	return &Policy{p: p}, nil
}

// Attempts is the total number of runs, the first included: there are
// Attempts()-1 retries at most.
func (p *Policy) Attempts() int { return p.p.Attempts() }

// Delay is the backoff before the retry that follows failed attempt n
// (1-based; n < 1 is taken as 1), jittered from r when the policy has
// jitter (nil r: math/rand/v2's global source). prev is the previous
// delay, which decorrelated jitter grows from (0 before the first retry).
func (p *Policy) Delay(n int, prev time.Duration, r Rand) time.Duration {
	return p.p.Delay(n, prev, r)
}

// Plan is the policy's timeline without jitter when every attempt fails
// with an error it retries: the delays it grants and what stops them.
func (p *Policy) Plan() Plan { return p.p.WithoutJitter().Plan(nil) }

// Retryable reports whether the policy retries err: false for a
// [Permanent] marker, true for an [After] or [Snooze] marker, otherwise
// whether one of its retry_on matchers matches err's text (an empty
// retry_on retries every error).
func (p *Policy) Retryable(err error) bool {
	switch {
	case IsPermanent(err):
		return false
	case isAfter(err), isSnooze(err):
		return true
	}
	return p.p.Retryable(retry.Failure{Err: err})
}

// String describes the policy on one line, e.g.
// "exponential base 2, initial 1s, max 30s, 3 attempts, no jitter".
func (p *Policy) String() string { return p.p.String() }

// Plan is a policy's retry timeline ([Policy.Plan]): Delays are the
// backoffs before retries 1, 2, …, Total their sum, and StoppedBy what
// ends them (messages.ReasonAttempts, or messages.ReasonRetryBudget for a
// retry_budget).
type Plan = retry.Plan

// Rand is the source of jitter: Float64 returns a number in [0, 1).
// *math/rand/v2.Rand satisfies it.
type Rand = retry.Rand

// NewRand returns a [Rand] seeded with seed: the same seed gives the same
// delays. It is safe for concurrent use.
func NewRand(seed uint64) Rand { return retry.NewRand(seed) }

// Classify names an error's class as jetfleet records it in attempts and
// dead letters: the first of messages.MatchTimeout, MatchRateLimit,
// MatchServerError and MatchNetwork whose built-in matcher matches err's
// text, or "error".
func Classify(err error) string { return retry.Classify(retry.Failure{Err: err}) }
