package oldmessages

import (
	"encoding/json"
	"strconv"
)

// DefaultJSONPath selects the items of an input file when json_path is unset.
const DefaultJSONPath = "$[*]"

// Circuit-breaker defaults, used when error_policy.circuit_breaker is set.
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerSuccessThreshold = 3
	DefaultBreakerTimeout          = Duration(30e9) // 30s
	DefaultBreakerHalfOpenRequests = 3
)

// DefaultMinGroups is best_effort.min_groups when unset.
const DefaultMinGroups = 1

// WithDefaults returns a deep copy of s with every default filled in: the
// spec as accepted, with effective values, as the coordinator records it.
// It fills pool, json_path (with input only), id_field, step names
// ("step-1", ...; "reduce-1", ... for reduce steps), each step's
// retry_config (attempts, backoff, initial_delay, max_delay, jitter_factor,
// jitter_mode, on_failure; base for exponential, increment for linear), the
// error policy (on_item_failure dlq, continue_on_failure true,
// error_collection aggregate, and the circuit breaker's and retry config's
// fields when they are set), and best_effort's min_groups and late_results.
// Unset retry budgets stay unset: their defaults are the operator's. A spec
// that passes Validate still does after WithDefaults. s is not modified.
func (s *JobSpec) WithDefaults() *JobSpec {
	if s == nil {
		return nil
	}
	c := s.Clone()
	if c.Pool == "" {
		c.Pool = DefaultPool
	}
	if c.Input != "" && c.JSONPath == "" {
		c.JSONPath = DefaultJSONPath
	}
	if c.IDField == "" {
		c.IDField = DefaultIDField
	}
	for i := range c.AgentTemplate {
		stepDefaults(&c.AgentTemplate[i], "step-"+strconv.Itoa(i+1))
	}
	for i := range c.Reduce {
		stepDefaults(&c.Reduce[i], "reduce-"+strconv.Itoa(i+1))
	}
	if c.ErrorPolicy == nil {
		c.ErrorPolicy = &ErrorPolicy{}
	}
	ep := c.ErrorPolicy
	if ep.OnItemFailure == nil {
		ep.OnItemFailure = &ItemFailureAction{Action: ItemFailureDLQ}
	}
	if ep.ContinueOnFailure == nil {
		ep.ContinueOnFailure = valuePtr(true)
	}
	if ep.ErrorCollection == nil {
		ep.ErrorCollection = &ErrorCollection{Mode: CollectAggregate}
	}
	if cb := ep.CircuitBreaker; cb != nil {
		if cb.FailureThreshold == 0 {
			cb.FailureThreshold = DefaultBreakerFailureThreshold
		}
		if cb.SuccessThreshold == 0 {
			cb.SuccessThreshold = DefaultBreakerSuccessThreshold
		}
		if cb.Timeout == 0 {
			cb.Timeout = DefaultBreakerTimeout
		}
		if cb.HalfOpenRequests == 0 {
			cb.HalfOpenRequests = DefaultBreakerHalfOpenRequests
		}
	}
	if ep.RetryConfig == nil && ep.OnItemFailure.Action == ItemFailureRetry {
		ep.RetryConfig = &WorkflowRetryConfig{}
	}
	if rc := ep.RetryConfig; rc != nil {
		if rc.MaxAttempts == nil {
			rc.MaxAttempts = valuePtr(DefaultAttempts)
		}
		rc.Backoff, rc.InitialDelay = backoffDefaults(rc.Backoff, rc.InitialDelay)
		if rc.MaxDelay == nil {
			rc.MaxDelay = valuePtr(DefaultMaxDelay)
		}
		if rc.JitterFactor == nil {
			rc.JitterFactor = valuePtr(DefaultJitterFactor)
		}
	}
	if be := c.BestEffort; be != nil {
		if be.MinGroups == 0 {
			be.MinGroups = DefaultMinGroups
		}
		if be.LateResults == "" {
			be.LateResults = LateResultsLog
		}
	}
	return c
}

func stepDefaults(st *Step, name string) {
	if st.Name == "" {
		st.Name = name
	}
	if st.RetryConfig == nil {
		st.RetryConfig = &RetryConfig{}
	}
	st.RetryConfig = st.RetryConfig.WithDefaults()
}

// WithDefaults returns a copy of rc with its defaults filled in: attempts
// (3), backoff (exponential, base 2; a linear increment defaults to the
// initial delay), initial_delay (1s, or the backoff's own initial),
// max_delay (30s), jitter_factor (0.3), jitter_mode (proportional, only
// when jitter is on) and
// on_failure (stop). retry_on and retry_budget stay unset. A nil rc gives
// the default config.
func (rc *RetryConfig) WithDefaults() *RetryConfig {
	c := rc.Clone()
	if c == nil {
		c = &RetryConfig{}
	}
	if c.Attempts == nil {
		c.Attempts = valuePtr(DefaultAttempts)
	}
	c.Backoff, c.InitialDelay = backoffDefaults(c.Backoff, c.InitialDelay)
	if c.MaxDelay == nil {
		c.MaxDelay = valuePtr(DefaultMaxDelay)
	}
	if c.JitterFactor == nil {
		c.JitterFactor = valuePtr(DefaultJitterFactor)
	}
	// jitter_mode on its own turns jitter on (package retry), so it is
	// filled only where jitter already is.
	if c.JitterMode == "" && c.Jitter {
		c.JitterMode = JitterProportional
	}
	if c.OnFailure == nil {
		c.OnFailure = &OnFailure{Action: OnFailureStop}
	}
	return c
}

// backoffDefaults fills a (copied) backoff and the effective initial delay.
func backoffDefaults(b *Backoff, initial *Duration) (*Backoff, *Duration) {
	if b == nil {
		b = &Backoff{Kind: BackoffExponential}
	}
	if initial == nil {
		if b.Initial != nil {
			initial = valuePtr(*b.Initial)
		} else {
			initial = valuePtr(DefaultInitialDelay)
		}
	}
	switch b.Kind {
	case BackoffExponential:
		if b.Base == 0 {
			b.Base = DefaultExpBase
		}
	case BackoffLinear:
		if b.Increment == nil {
			eff := *initial
			if b.Initial != nil {
				eff = *b.Initial
			}
			b.Increment = valuePtr(eff)
		}
	}
	return b, initial
}

func valuePtr[T any](v T) *T { return &v }

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}

// Clone returns a deep copy of s.
func (s *JobSpec) Clone() *JobSpec {
	if s == nil {
		return nil
	}
	c := *s
	if s.Items != nil {
		c.Items = make([]json.RawMessage, len(s.Items))
		for i, it := range s.Items {
			c.Items[i] = cloneSlice(it)
		}
	}
	c.AgentTemplate = cloneSteps(s.AgentTemplate)
	c.Reduce = cloneSteps(s.Reduce)
	c.ErrorPolicy = s.ErrorPolicy.Clone()
	c.RetryBudget = clonePtr(s.RetryBudget)
	c.RetryBudgetPerItem = clonePtr(s.RetryBudgetPerItem)
	c.BestEffort = clonePtr(s.BestEffort)
	if s.Env != nil {
		c.Env = make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			c.Env[k] = v
		}
	}
	return &c
}

func cloneSteps(steps []Step) []Step {
	if steps == nil {
		return nil
	}
	out := make([]Step, len(steps))
	for i := range steps {
		out[i] = *steps[i].Clone()
	}
	return out
}

// Clone returns a deep copy of st.
func (st *Step) Clone() *Step {
	if st == nil {
		return nil
	}
	c := *st
	if st.With != nil {
		c.With = cloneAny(st.With).(map[string]any)
	}
	c.RetryConfig = st.RetryConfig.Clone()
	return &c
}

// cloneAny deep-copies maps and slices of JSON-like data.
func cloneAny(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneAny(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneAny(e)
		}
		return s
	case json.RawMessage:
		return cloneSlice(x)
	}
	return v
}

// Clone returns a deep copy of rc.
func (rc *RetryConfig) Clone() *RetryConfig {
	if rc == nil {
		return nil
	}
	c := *rc
	c.Attempts = clonePtr(rc.Attempts)
	c.Backoff = rc.Backoff.Clone()
	c.InitialDelay = clonePtr(rc.InitialDelay)
	c.MaxDelay = clonePtr(rc.MaxDelay)
	c.JitterFactor = clonePtr(rc.JitterFactor)
	if rc.RetryOn != nil {
		c.RetryOn = make([]Matcher, len(rc.RetryOn))
		for i, m := range rc.RetryOn {
			m.ExitCodes = cloneSlice(m.ExitCodes)
			c.RetryOn[i] = m
		}
	}
	c.RetryBudget = clonePtr(rc.RetryBudget)
	c.OnFailure = clonePtr(rc.OnFailure)
	return &c
}

// Clone returns a deep copy of b.
func (b *Backoff) Clone() *Backoff {
	if b == nil {
		return nil
	}
	c := *b
	c.Increment = clonePtr(b.Increment)
	c.Delays = cloneSlice(b.Delays)
	c.Initial = clonePtr(b.Initial)
	return &c
}

// Clone returns a deep copy of ep.
func (ep *ErrorPolicy) Clone() *ErrorPolicy {
	if ep == nil {
		return nil
	}
	c := *ep
	if ep.OnItemFailure != nil {
		a := *ep.OnItemFailure
		a.Custom = ep.OnItemFailure.Custom.Clone()
		c.OnItemFailure = &a
	}
	c.ContinueOnFailure = clonePtr(ep.ContinueOnFailure)
	c.MaxFailures = clonePtr(ep.MaxFailures)
	c.FailureThreshold = clonePtr(ep.FailureThreshold)
	c.ErrorCollection = clonePtr(ep.ErrorCollection)
	c.CircuitBreaker = clonePtr(ep.CircuitBreaker)
	if rc := ep.RetryConfig; rc != nil {
		r := *rc
		r.MaxAttempts = clonePtr(rc.MaxAttempts)
		r.Backoff = rc.Backoff.Clone()
		r.InitialDelay = clonePtr(rc.InitialDelay)
		r.MaxDelay = clonePtr(rc.MaxDelay)
		r.JitterFactor = clonePtr(rc.JitterFactor)
		c.RetryConfig = &r
	}
	return &c
}
