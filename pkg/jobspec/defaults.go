package jobspec

import (
	"cmp"
	"reflect"
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// WithDefaults returns a deep copy of s with every default filled in: the
// spec as accepted, with effective values, as the coordinator records it.
// It fills pool, json_path (with input only), id_field, step names
// ("step-1", ...; "reduce-1", ... for reduce steps), each step's
// retry_config (attempts, backoff, initial_delay, max_delay, jitter_factor,
// jitter_mode, on_failure; base for exponential, increment for linear), the
// error policy (on_item_failure dlq, continue_on_failure true,
// error_collection aggregate, and the circuit breaker's and retry config's
// fields when they are set), and best_effort's min_groups (1), deadline
// (5m) and late_results (AD-44's log_only and update_result recorded as log
// and update); a coordinator then applies its operator's best-effort
// defaults (BestEffortSettings.Apply).
// Unset retry budgets stay unset: their defaults are the operator's. A spec
// that passes Validate still does after WithDefaults. s is not modified.
func WithDefaults(s *messages.JobSpec) *messages.JobSpec {
	if s == nil {
		return nil
	}
	c := deepCopy(s)
	c.Pool = cmp.Or(c.Pool, messages.DefaultPool)
	if c.Input != "" && c.JSONPath == "" {
		c.JSONPath = messages.DefaultJSONPath
	}
	c.IDField = cmp.Or(c.IDField, messages.DefaultIDField)
	for i := range c.AgentTemplate {
		stepDefaults(&c.AgentTemplate[i], "step-"+strconv.Itoa(i+1))
	}
	for i := range c.Reduce {
		stepDefaults(&c.Reduce[i], "reduce-"+strconv.Itoa(i+1))
	}
	if c.Setup != nil {
		for i := range c.Setup.Commands {
			stepDefaults(&c.Setup.Commands[i], "setup-"+strconv.Itoa(i+1))
		}
	}
	setDefault(&c.ErrorPolicy, messages.ErrorPolicy{})
	ep := c.ErrorPolicy
	setDefault(&ep.OnItemFailure, messages.ItemFailureAction{Action: messages.ItemFailureDLQ})
	setDefault(&ep.ContinueOnFailure, true)
	setDefault(&ep.ErrorCollection, messages.ErrorCollection{Mode: messages.CollectAggregate})
	breakerDefaults(ep.CircuitBreaker)
	if ep.RetryConfig == nil && ep.OnItemFailure.Action == messages.ItemFailureRetry {
		ep.RetryConfig = &messages.WorkflowRetryConfig{}
	}
	if rc := ep.RetryConfig; rc != nil {
		setDefault(&rc.MaxAttempts, messages.DefaultAttempts)
		rc.Backoff, rc.InitialDelay = backoffDefaults(rc.Backoff, rc.InitialDelay)
		setDefault(&rc.MaxDelay, messages.DefaultMaxDelay)
		setDefault(&rc.JitterFactor, messages.DefaultJitterFactor)
	}
	if be := c.BestEffort; be != nil {
		be.MinGroups = cmp.Or(be.MinGroups, messages.DefaultMinGroups)
		be.Deadline = cmp.Or(be.Deadline, messages.Duration(DefaultBestEffortDeadline))
		switch be.LateResults {
		case "", messages.LateResultsLogOnly:
			be.LateResults = messages.LateResultsLog
		case messages.LateResultsUpdateResult:
			be.LateResults = messages.LateResultsUpdate
		}
	}
	return c
}

func stepDefaults(st *messages.Step, name string) {
	st.Name = cmp.Or(st.Name, name)
	st.RetryConfig = RetryConfigWithDefaults(st.RetryConfig)
}

// RetryConfigWithDefaults returns a copy of rc with its defaults filled in:
// attempts (3), backoff (exponential, base 2; a linear increment defaults
// to the initial delay), initial_delay (1s, or the backoff's own initial),
// max_delay (30s), jitter_factor (0.3), jitter_mode (proportional, only
// when jitter is on), on_failure (stop) and a given circuit_breaker's
// fields (5 / 3 / 30s / 3). retry_on, retry_budget and circuit_breaker
// stay unset. A nil rc gives the default config.
func RetryConfigWithDefaults(rc *messages.RetryConfig) *messages.RetryConfig {
	c := deepCopy(rc)
	if c == nil {
		c = &messages.RetryConfig{}
	}
	setDefault(&c.Attempts, messages.DefaultAttempts)
	c.Backoff, c.InitialDelay = backoffDefaults(c.Backoff, c.InitialDelay)
	setDefault(&c.MaxDelay, messages.DefaultMaxDelay)
	setDefault(&c.JitterFactor, messages.DefaultJitterFactor)
	// jitter_mode on its own turns jitter on (package retry), so it is
	// filled only where jitter already is.
	if c.JitterMode == "" && c.Jitter {
		c.JitterMode = messages.JitterProportional
	}
	setDefault(&c.OnFailure, messages.OnFailure{Action: messages.OnFailureStop})
	breakerDefaults(c.CircuitBreaker)
	return c
}

// breakerDefaults fills a circuit breaker's unset fields (5 / 3 / 30s / 3);
// nil stays nil (no breaker).
func breakerDefaults(cb *messages.CircuitBreakerConfig) {
	if cb == nil {
		return
	}
	cb.FailureThreshold = cmp.Or(cb.FailureThreshold, messages.DefaultBreakerFailureThreshold)
	cb.SuccessThreshold = cmp.Or(cb.SuccessThreshold, messages.DefaultBreakerSuccessThreshold)
	cb.Timeout = cmp.Or(cb.Timeout, messages.DefaultBreakerTimeout)
	cb.HalfOpenRequests = cmp.Or(cb.HalfOpenRequests, messages.DefaultBreakerHalfOpenRequests)
}

// backoffDefaults fills a (copied) backoff and the effective initial delay.
func backoffDefaults(b *messages.Backoff, initial *messages.Duration) (*messages.Backoff, *messages.Duration) {
	setDefault(&b, messages.Backoff{Kind: messages.BackoffExponential})
	if initial == nil {
		initial = new(messages.DefaultInitialDelay)
		if b.Initial != nil {
			initial = new(*b.Initial)
		}
	}
	switch b.Kind {
	case messages.BackoffExponential:
		b.Base = cmp.Or(b.Base, messages.DefaultExpBase)
	case messages.BackoffLinear:
		if b.Increment == nil {
			eff := *initial
			if b.Initial != nil {
				eff = *b.Initial
			}
			b.Increment = new(eff)
		}
	}
	return b, initial
}

// setDefault points *p at v when it is unset (nil).
func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

// deepCopy returns a copy of v that shares no memory with it: pointers,
// slices, maps and interfaces are copied all the way down (the spec types
// have exported fields only).
func deepCopy[T any](v T) T {
	out := reflect.New(reflect.TypeFor[T]()).Elem()
	copyValue(out, reflect.ValueOf(&v).Elem())
	return out.Interface().(T)
}

func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer, reflect.Interface:
		if src.IsNil() {
			return
		}
		e := reflect.New(src.Elem().Type()).Elem()
		copyValue(e, src.Elem())
		if src.Kind() == reflect.Pointer {
			e = e.Addr()
		}
		dst.Set(e)
	case reflect.Struct:
		for i := range src.NumField() {
			copyValue(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
		for i := range src.Len() {
			copyValue(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeMapWithSize(src.Type(), src.Len()))
		for it := src.MapRange(); it.Next(); {
			e := reflect.New(src.Type().Elem()).Elem()
			copyValue(e, it.Value())
			dst.SetMapIndex(it.Key(), e)
		}
	default:
		dst.Set(src)
	}
}
