package retry

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Policy is a step's compiled retry_config (docs/contract.md §4): the backoff
// strategy, jitter, error matchers, duration budget and on_failure action,
// with every default applied. It computes delays and decisions and never
// sleeps. A Policy is immutable and safe for concurrent use.
type Policy struct {
	attempts     int
	kind         messages.BackoffKind
	initial      time.Duration
	maxDelay     time.Duration
	base         float64
	increment    time.Duration
	delays       []time.Duration
	jitter       bool
	jitterFactor float64
	jitterMode   messages.JitterMode
	matchers     []Matcher
	budget       time.Duration
	hasBudget    bool
	onFailure    FailureAction
	breaker      *Breaker // the step's own circuit breaker; nil = none
}

// NewPolicy compiles cfg (nil = all defaults): 3 attempts, exponential
// backoff base 2 from 1s, capped at 30s, no jitter (factor 0.3, proportional
// mode when enabled), every error retried, no duration budget, on_failure
// stop. Every strategy's delays are capped at max_delay, an initial delay
// above it included. A legacy backoff `initial` overrides initial_delay; a linear
// increment defaults to the initial delay; setting jitter_mode enables
// jitter. It reports every problem at once in a [*ConfigError].
func NewPolicy(cfg *messages.RetryConfig) (*Policy, error) {
	if cfg == nil {
		cfg = &messages.RetryConfig{}
	}
	p := &Policy{
		attempts:     messages.DefaultAttempts,
		kind:         messages.BackoffExponential,
		initial:      messages.DefaultInitialDelay.D(),
		maxDelay:     messages.DefaultMaxDelay.D(),
		base:         messages.DefaultExpBase,
		increment:    -1, // linear: the initial delay
		jitter:       cfg.Jitter || cfg.JitterMode != "",
		jitterFactor: messages.DefaultJitterFactor,
		jitterMode:   messages.JitterProportional,
		onFailure:    FailureAction{Action: messages.OnFailureStop},
	}
	var ce ConfigError
	if cfg.Attempts != nil {
		p.attempts = *cfg.Attempts
		if p.attempts < 1 || p.attempts > messages.MaxAttempts {
			ce.add("attempts", "must be in [1, %d], got %d", messages.MaxAttempts, p.attempts)
		}
	}
	if cfg.InitialDelay != nil {
		p.initial = cfg.InitialDelay.D()
	}
	if cfg.MaxDelay != nil {
		p.maxDelay = cfg.MaxDelay.D()
		if p.maxDelay < 0 {
			ce.add("max_delay", "must not be negative, got %s", *cfg.MaxDelay)
		}
	}
	initialField := "initial_delay"
	if b := cfg.Backoff; b != nil {
		p.compileBackoff(b, "backoff", &ce)
		switch {
		case b.Initial != nil && p.kind == messages.BackoffFixed:
			initialField = "backoff.fixed.delay"
		case b.Initial != nil:
			initialField = "backoff." + string(p.kind) + ".initial"
		}
	}
	// An initial delay above max_delay is capped like any other delay
	// (BaseDelay): valid, if every delay is then max_delay.
	if p.initial < 0 {
		ce.add(initialField, "must not be negative, got %s", messages.Duration(p.initial))
	}
	if cfg.JitterFactor != nil {
		p.jitterFactor = *cfg.JitterFactor
		if !(p.jitterFactor >= 0 && p.jitterFactor <= 1) {
			ce.add("jitter_factor", "must be in [0, 1], got %v", p.jitterFactor)
		}
	}
	switch cfg.JitterMode {
	case "":
	case messages.JitterProportional, messages.JitterFull, messages.JitterEqual, messages.JitterDecorrelated:
		p.jitterMode = cfg.JitterMode
	default:
		ce.add("jitter_mode", "must be proportional, full, equal or decorrelated, got %q", cfg.JitterMode)
	}
	for i, m := range cfg.RetryOn {
		cm, err := CompileMatcher(m)
		if err != nil {
			field := fmt.Sprintf("retry_on[%d]", i)
			if m.Pattern != "" {
				field += ".pattern"
			}
			ce.add(field, "%s", problemText(err))
			continue
		}
		p.matchers = append(p.matchers, cm)
	}
	if cfg.RetryBudget != nil {
		p.budget, p.hasBudget = cfg.RetryBudget.D(), true
		if p.budget <= 0 {
			ce.add("retry_budget", "must be greater than 0 (omit it for no budget), got %s", *cfg.RetryBudget)
		}
	}
	if cfg.CircuitBreaker != nil {
		b, err := NewBreaker(cfg.CircuitBreaker)
		if err != nil {
			var bce *ConfigError
			if errors.As(err, &bce) {
				for _, pr := range bce.Problems {
					ce.add("circuit_breaker."+pr.Field, "%s", pr.Message)
				}
			}
		}
		p.breaker = b
	}
	if cfg.OnFailure != nil {
		fa, err := NewFailureAction(cfg.OnFailure)
		if err != nil {
			ce.add("on_failure", "%s", problemText(err))
		}
		p.onFailure = fa
	}
	if err := ce.err(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) compileBackoff(b *messages.Backoff, field string, ce *ConfigError) {
	switch b.Kind {
	case "":
		// The object form without a strategy keeps the default one.
	case messages.BackoffFixed, messages.BackoffLinear, messages.BackoffExponential,
		messages.BackoffFibonacci, messages.BackoffCustom:
		p.kind = b.Kind
	default:
		ce.add(field, "unknown strategy %q (want fixed, linear, exponential, fibonacci or custom)", b.Kind)
	}
	// Paths as the spec parser writes them: backoff.exponential.base.
	kp := field + "." + string(p.kind)
	if b.Initial != nil {
		p.initial = b.Initial.D()
	}
	if b.Base != 0 {
		p.base = b.Base
		if math.IsNaN(b.Base) || math.IsInf(b.Base, 0) || b.Base < 1 {
			ce.add(kp+".base", "must be a number >= 1, got %v", b.Base)
		}
	}
	if b.Increment != nil {
		p.increment = b.Increment.D()
		if p.increment < 0 {
			ce.add(kp+".increment", "must not be negative, got %s", *b.Increment)
		}
	}
	for i, d := range b.Delays {
		if d < 0 {
			ce.add(fmt.Sprintf("%s.delays[%d]", kp, i), "must not be negative, got %s", d)
		}
		p.delays = append(p.delays, d.D())
	}
}

// Attempts is the total number of runs of the step, the first included.
func (p *Policy) Attempts() int { return p.attempts }

// Strategy is the backoff strategy.
func (p *Policy) Strategy() messages.BackoffKind { return p.kind }

// InitialDelay is I in the backoff formulas (after a legacy `initial`).
func (p *Policy) InitialDelay() time.Duration { return p.initial }

// MaxDelay caps every computed delay.
func (p *Policy) MaxDelay() time.Duration { return p.maxDelay }

// Budget is the retry_budget: the bound on the step's cumulative backoff
// delay; ok is false when none is configured.
func (p *Policy) Budget() (d time.Duration, ok bool) { return p.budget, p.hasBudget }

// JitterMode is the jitter applied to delays, or "" when jitter is off.
func (p *Policy) JitterMode() messages.JitterMode {
	if !p.jitter {
		return ""
	}
	return p.jitterMode
}

// OnFailure is what the step does when it gives up.
func (p *Policy) OnFailure() FailureAction { return p.onFailure }

// Breaker is the step's own circuit breaker (retry_config.circuit_breaker),
// nil when it has none. While it is open the step fails fast.
func (p *Policy) Breaker() *Breaker { return p.breaker }

// WithoutJitter returns a copy of p whose delays are not jittered — the
// strategy's timeline as documented, e.g. for `fleetctl backoff plan`.
func (p *Policy) WithoutJitter() *Policy {
	q := *p
	q.jitter = false
	return &q
}

// String describes the policy on one line, e.g.
// "exponential base 2, initial 1s, max 30s, 3 attempts, no jitter".
func (p *Policy) String() string {
	var b strings.Builder
	b.WriteString(string(p.kind))
	switch p.kind {
	case messages.BackoffExponential:
		fmt.Fprintf(&b, " base %v", p.base)
	case messages.BackoffLinear:
		fmt.Fprintf(&b, " +%s", messages.Duration(p.inc()))
	case messages.BackoffCustom:
		ds := make([]string, len(p.delays))
		for i, d := range p.delays {
			ds[i] = messages.Duration(d).String()
		}
		fmt.Fprintf(&b, " [%s]", strings.Join(ds, " "))
	}
	fmt.Fprintf(&b, ", initial %s, max %s, %d attempts", messages.Duration(p.initial), messages.Duration(p.maxDelay), p.attempts)
	switch {
	case !p.jitter:
		b.WriteString(", no jitter")
	case p.jitterMode == messages.JitterProportional:
		fmt.Fprintf(&b, ", jitter ±%v%%", math.Round(p.jitterFactor*1000)/10)
	default:
		fmt.Fprintf(&b, ", %s jitter", p.jitterMode)
	}
	if p.hasBudget {
		fmt.Fprintf(&b, ", retry budget %s", messages.Duration(p.budget))
	}
	return b.String()
}

// inc is the linear increment: the configured one, or the initial delay.
func (p *Policy) inc() time.Duration {
	if p.increment < 0 {
		return p.initial
	}
	return p.increment
}

// Delay is the backoff before the retry that follows failed attempt n
// (1-based; n < 1 is taken as 1): the strategy's delay, capped at
// max_delay, jittered when jitter is on, then clamped to [0, max_delay].
// prev is the previous delay (decorrelated jitter grows from it; 0 before
// the first retry); r is the random source (nil = [DefaultRand]). It never
// overflows or goes negative, whatever n.
func (p *Policy) Delay(n int, prev time.Duration, r Rand) time.Duration {
	d := p.BaseDelay(n)
	if p.jitter {
		d = p.applyJitter(d, prev, r)
	}
	return d
}

// BaseDelay is the strategy's delay after failed attempt n, capped at
// max_delay, without jitter:
//
//	fixed        I
//	linear       I + increment·(n−1)
//	exponential  I·base^(n−1)
//	fibonacci    I·fib(n), fib = 1, 1, 2, 3, 5, 8, …
//	custom       delays[n−1], or max_delay past the end of the list
func (p *Policy) BaseDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	i, limit := p.initial, p.maxDelay
	if limit < 0 {
		limit = 0
	}
	var d time.Duration
	switch p.kind {
	case messages.BackoffFixed:
		d = i
	case messages.BackoffLinear:
		d = linearDelay(i, p.inc(), n, limit)
	case messages.BackoffFibonacci:
		d = fibonacciDelay(i, n, limit)
	case messages.BackoffCustom:
		if n <= len(p.delays) {
			d = p.delays[n-1]
		} else {
			d = limit
		}
	default:
		d = exponentialDelay(i, p.base, n, limit)
	}
	return clamp(d, limit)
}

// linearDelay is min(limit, i + inc·(n−1)) without overflow.
func linearDelay(i, inc time.Duration, n int, limit time.Duration) time.Duration {
	if i >= limit {
		return limit
	}
	if inc <= 0 {
		return i
	}
	k := int64(n - 1)
	if k > int64((limit-i)/inc) {
		return limit
	}
	return i + inc*time.Duration(k)
}

// exponentialDelay is min(limit, i·base^(n−1)) without overflow: the product
// is computed in float64 and compared with the limit before conversion.
func exponentialDelay(i time.Duration, base float64, n int, limit time.Duration) time.Duration {
	if i <= 0 {
		return 0
	}
	if i >= limit {
		return limit
	}
	if base <= 1 || n == 1 {
		return i
	}
	f := float64(i) * math.Pow(base, float64(n-1))
	if !(f < float64(limit)) { // also +Inf and NaN
		return limit
	}
	return time.Duration(math.Round(f))
}

// fibonacciDelay is min(limit, i·fib(n)), iterating with an early exit once
// the product reaches the limit, so it neither overflows nor loops long.
func fibonacciDelay(i time.Duration, n int, limit time.Duration) time.Duration {
	if i <= 0 {
		return 0
	}
	if i >= limit {
		return limit
	}
	most := int64(limit / i)   // fib(n) above this means i·fib(n) > limit
	a, b := int64(1), int64(1) // fib(1), fib(2)
	for k := 3; k <= n; k++ {
		if a > most-b {
			return limit
		}
		a, b = b, a+b
	}
	return i * time.Duration(b)
}

// applyJitter randomises d according to the jitter mode (d is already capped).
func (p *Policy) applyJitter(d, prev time.Duration, r Rand) time.Duration {
	limit := max(p.maxDelay, 0)
	u := unit(r)
	var f float64
	switch p.jitterMode {
	case messages.JitterFull: // uniform [0, d]
		f = float64(d) * u
	case messages.JitterEqual: // d/2 + uniform [0, d/2]
		f = float64(d)/2 + float64(d)/2*u
	case messages.JitterDecorrelated: // min(cap, uniform [I, 3·prev]), prev starting at I
		lo := min(p.initial, limit)
		hi := min(max(prev, lo), limit)
		f = float64(lo) + (3*float64(hi)-float64(lo))*u
	default: // proportional: uniform d·(1±factor)
		f = float64(d) * (1 - p.jitterFactor + 2*p.jitterFactor*u)
	}
	if !(f < float64(limit)) {
		return limit
	}
	return clamp(time.Duration(math.Round(f)), limit)
}

// clamp bounds d to [0, limit].
func clamp(d, limit time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d > limit {
		return limit
	}
	return d
}
