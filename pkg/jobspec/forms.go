package jobspec

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The decode hooks of the types with several forms (docs/job-spec.md,
// "Values"): a string naming a variant, or an object with one key naming
// it and holding its parameters. They accept every form a user may write;
// the types' MarshalJSON (package messages) writes the canonical one.

// ---- Duration ----

// decodeDurationHook reads a duration: a humantime string, the {secs, nanos}
// object form ({secs: 3, nanos: 0}), or the number 0.
func decodeDurationHook(d *decoder, path string, v any, rv reflect.Value) bool {
	if _, iv, bad := firstInvalid(path, v); bad { // inside {secs, nanos}
		d.addf(path, "%s", iv.problem)
		return false
	}
	dur, err := duration(v)
	if err != nil {
		d.addf(path, "%v", err)
		return false
	}
	rv.SetInt(int64(dur))
	return true
}

func duration(v any) (messages.Duration, error) {
	switch x := v.(type) {
	case string:
		return messages.ParseDuration(x)
	case json.Number:
		if f, err := jsonnode.AsFloat(x); err == nil && f == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: bare number %s: write a string with a unit, e.g. \"%ss\"", messages.ErrBadDuration, x, x)
	case map[string]any:
		var secs, nanos int64
		for _, k := range sortedKeys(x) {
			n, err := jsonnode.AsInt(x[k])
			if err != nil {
				return 0, fmt.Errorf("%w: {secs, nanos} form: %s: %v", messages.ErrBadDuration, k, err)
			}
			switch k {
			case "secs":
				secs = n
			case "nanos":
				nanos = n
			default:
				return 0, fmt.Errorf("%w: {secs, nanos} form: unknown field %q", messages.ErrBadDuration, k)
			}
		}
		switch {
		case len(x) == 0:
			return 0, fmt.Errorf("%w: {secs, nanos} form needs secs", messages.ErrBadDuration)
		case secs < 0 || nanos < 0 || nanos >= 1e9:
			return 0, fmt.Errorf("%w: {secs: %d, nanos: %d}: secs must be >= 0 and nanos in [0, 1e9)", messages.ErrBadDuration, secs, nanos)
		case secs > math.MaxInt64/int64(time.Second)-1:
			return 0, fmt.Errorf("%w: {secs: %d}: too large", messages.ErrBadDuration, secs)
		}
		return messages.Duration(time.Duration(secs)*time.Second + time.Duration(nanos)), nil
	}
	return 0, fmt.Errorf("%w: want a string such as \"30s\" or {secs, nanos}, got %s", messages.ErrBadDuration, jsonnode.Describe(v))
}

// ---- Inline items ----

// decodeRawHook takes an inline item: the converter wrote it as JSON, keys
// in the document's order.
func decodeRawHook(d *decoder, path string, v any, rv reflect.Value) bool {
	if raw, ok := v.(json.RawMessage); ok {
		rv.SetBytes(raw)
		return true
	}
	// An item holding a value the converter could not convert.
	return d.data(path, v)
}

// ---- Backoff ----

var backoffKinds = []string{string(messages.BackoffFixed), string(messages.BackoffLinear), string(messages.BackoffExponential), string(messages.BackoffFibonacci), string(messages.BackoffCustom)}

const backoffForms = "a strategy name (fixed, linear, exponential, fibonacci or custom) or a one-key object such as {exponential: {base: 3}}"

func decodeBackoffHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var b messages.Backoff
	switch x := v.(type) {
	case string:
		k := messages.BackoffKind(strings.ToLower(x))
		if !k.Known() {
			d.addf(path, "unknown backoff strategy %q (use fixed, linear, exponential, fibonacci or custom)%s", x, suggestion(x, backoffKinds))
			return false
		}
		b.Kind = k
	case map[string]any:
		key, params, ok := d.oneKey(path, x, "one key naming the strategy (fixed, linear, exponential, fibonacci or custom)")
		if !ok {
			return false
		}
		kp := messages.JoinPath(path, key)
		b.Kind = messages.BackoffKind(strings.ToLower(key))
		if !b.Kind.Known() {
			d.addf(kp, "unknown backoff strategy (use fixed, linear, exponential, fibonacci or custom)%s", suggestion(key, backoffKinds))
			return false
		}
		if params == nil {
			break // {fixed: null}
		}
		switch b.Kind {
		case messages.BackoffFixed:
			var p struct {
				Delay   *messages.Duration `json:"delay"`
				Initial *messages.Duration `json:"initial"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			if p.Delay != nil && p.Initial != nil {
				d.addf(messages.JoinPath(kp, "initial"), "set delay or initial, not both")
			}
			b.Initial = p.Delay
			if b.Initial == nil {
				b.Initial = p.Initial
			}
		case messages.BackoffLinear:
			var p struct {
				Initial   *messages.Duration `json:"initial"`
				Increment *messages.Duration `json:"increment"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial, b.Increment = p.Initial, p.Increment
		case messages.BackoffExponential:
			var p struct {
				Initial    *messages.Duration `json:"initial"`
				Base       *float64           `json:"base"`
				Multiplier *float64           `json:"multiplier"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial = p.Initial
			base, name := p.Base, "base"
			if p.Multiplier != nil {
				if p.Base != nil {
					d.addf(messages.JoinPath(kp, "multiplier"), "set base or multiplier (its legacy name), not both")
				} else {
					base, name = p.Multiplier, "multiplier"
				}
			}
			if base != nil {
				if *base < 1 {
					d.addf(messages.JoinPath(kp, name), "must be >= 1, got %s", strconv.FormatFloat(*base, 'g', -1, 64))
				} else {
					b.Base = *base
				}
			}
		case messages.BackoffFibonacci:
			var p struct {
				Initial *messages.Duration `json:"initial"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial = p.Initial
		case messages.BackoffCustom:
			var p struct {
				Delays []messages.Duration `json:"delays"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Delays = p.Delays
		}
	default:
		d.typeErr(path, backoffForms, v)
		return false
	}
	rv.Set(reflect.ValueOf(b))
	return true
}

// ---- Matcher ----

var builtinMatchers = []string{messages.MatchNetwork, messages.MatchTimeout, messages.MatchServerError, messages.MatchRateLimit}

func isBuiltinMatcher(s string) bool {
	for _, n := range builtinMatchers {
		if s == n {
			return true
		}
	}
	return false
}

const matcherForms = "network, timeout, server_error, rate_limit, {pattern: regex} or {exit_code: [codes]}"

func decodeMatcherHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var m messages.Matcher
	switch x := v.(type) {
	case string:
		name := strings.ToLower(x)
		if !isBuiltinMatcher(name) {
			d.addf(path, "unknown matcher %q (use %s)%s", x, matcherForms, suggestion(name, builtinMatchers))
			return false
		}
		m.Builtin = name
	case map[string]any:
		key, val, ok := d.oneKey(path, x, "one key: pattern or exit_code")
		if !ok {
			return false
		}
		kp := messages.JoinPath(path, key)
		switch key {
		case "pattern":
			s, ok := val.(string)
			if !ok {
				d.typeErr(kp, "a regular expression string", val)
				return false
			}
			if s == "" {
				d.addf(kp, "must not be empty (omit retry_on to retry every error)")
				return false
			}
			m.Pattern = s
		case "exit_code":
			var codes []int
			if arr, isArr := val.([]any); isArr {
				d.value(kp, arr, reflect.ValueOf(&codes).Elem())
				if len(arr) == 0 {
					d.addf(kp, "must list at least one exit code")
					return false
				}
			} else if _, ok := val.(json.Number); ok {
				var c int
				d.value(kp, val, reflect.ValueOf(&c).Elem())
				codes = []int{c}
			} else {
				d.typeErr(kp, "an exit code or a list of exit codes", val)
				return false
			}
			m.ExitCodes = codes
		default:
			d.addf(kp, "unknown matcher field (use pattern or exit_code)%s", suggestion(key, []string{"pattern", "exit_code"}))
			return false
		}
	default:
		d.typeErr(path, "a matcher ("+matcherForms+")", v)
		return false
	}
	rv.Set(reflect.ValueOf(m))
	return true
}

// ---- OnFailure ----

func decodeOnFailureHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var f messages.OnFailure
	switch x := v.(type) {
	case string:
		switch a := strings.ToLower(x); a {
		case messages.OnFailureStop, messages.OnFailureContinue:
			f.Action = a
		case messages.OnFailureFallback:
			d.addf(path, `fallback needs a command: {fallback: {command: "..."}}`)
			return false
		default:
			d.addf(path, `unknown action %q (use stop, continue or {fallback: {command: "..."}})%s`, x, suggestion(a, []string{messages.OnFailureStop, messages.OnFailureContinue, messages.OnFailureFallback}))
			return false
		}
	case map[string]any:
		key, val, ok := d.oneKey(path, x, `{fallback: {command: "..."}}`)
		if !ok {
			return false
		}
		kp := messages.JoinPath(path, key)
		if key != messages.OnFailureFallback {
			d.addf(kp, `unknown action (the object form is {fallback: {command: "..."}}; write stop or continue as a string)%s`, suggestion(key, []string{messages.OnFailureFallback}))
			return false
		}
		f.Action = messages.OnFailureFallback
		var p struct {
			Command *string `json:"command"`
			Claude  *string `json:"claude"`
			// CommitRequired: the fallback must leave a new commit.
			CommitRequired bool              `json:"commit_required"`
			FailWorkflow   bool              `json:"fail_workflow"` // the step fails after the fallback
			Steps          []messages.Step   `json:"steps"`         // shell and claude steps in turn
			MaxAttempts    int               `json:"max_attempts"`  // the step's runs, the fallback between
			Fatal          bool              `json:"handler_failure_fatal"`
			Timeout        messages.Duration `json:"timeout"`
		}
		if val != nil {
			d.value(kp, val, reflect.ValueOf(&p).Elem())
		}
		switch {
		case p.Command != nil && p.Claude != nil:
			d.addf(kp, "set one of command (a shell command) and claude (a prompt for Claude Code's CLI)")
			return false
		case p.Command != nil:
			f.Fallback = *p.Command
		case p.Claude != nil:
			f.Fallback, f.Claude = *p.Claude, true
		}
		f.CommitRequired, f.FailWorkflow, f.Steps, f.MaxAttempts, f.HandlerFailureFatal, f.Timeout = p.CommitRequired, p.FailWorkflow, p.Steps, p.MaxAttempts, p.Fatal, p.Timeout
	default:
		d.typeErr(path, `stop, continue or {fallback: {command: "..."}}`, v)
		return false
	}
	rv.Set(reflect.ValueOf(f))
	return true
}

// ---- ItemFailureAction ----

var itemFailureActions = []string{messages.ItemFailureDLQ, messages.ItemFailureRetry, messages.ItemFailureSkip, messages.ItemFailureStop, messages.ItemFailureCustom}

const customStepForm = `{custom: {handler: name, with: {...}}} or {custom: {shell: "..."}}`

func decodeItemFailureHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var a messages.ItemFailureAction
	switch x := v.(type) {
	case string:
		switch s := strings.ToLower(x); s {
		case messages.ItemFailureDLQ, messages.ItemFailureRetry, messages.ItemFailureSkip, messages.ItemFailureStop:
			a.Action = s
		case messages.ItemFailureCustom:
			d.addf(path, "custom needs a step: %s", customStepForm)
			return false
		default:
			d.addf(path, "unknown action %q (use dlq, retry, skip, stop or %s)%s", x, customStepForm, suggestion(s, itemFailureActions))
			return false
		}
	case map[string]any:
		key, val, ok := d.oneKey(path, x, customStepForm)
		if !ok {
			return false
		}
		kp := messages.JoinPath(path, key)
		if key != messages.ItemFailureCustom {
			d.addf(kp, "unknown action (the object form is %s; write dlq, retry, skip or stop as a string)%s", customStepForm, suggestion(key, []string{messages.ItemFailureCustom}))
			return false
		}
		if val == nil {
			d.addf(kp, "custom needs a step: %s", customStepForm)
			return false
		}
		a.Action = messages.ItemFailureCustom
		a.Custom = &messages.Step{}
		d.value(kp, val, reflect.ValueOf(a.Custom).Elem())
	default:
		d.typeErr(path, "dlq, retry, skip, stop or "+customStepForm, v)
		return false
	}
	rv.Set(reflect.ValueOf(a))
	return true
}

// ---- ErrorCollection ----

func decodeErrorCollectionHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var c messages.ErrorCollection
	modes := []string{messages.CollectAggregate, messages.CollectImmediate, messages.CollectBatched}
	switch x := v.(type) {
	case string:
		switch s := strings.ToLower(x); s {
		case messages.CollectAggregate, messages.CollectImmediate:
			c.Mode = s
		case messages.CollectBatched:
			d.addf(path, "batched needs a size: {batched: {size: N}}")
			return false
		default:
			d.addf(path, "unknown mode %q (use aggregate, immediate or {batched: {size: N}})%s", x, suggestion(s, modes))
			return false
		}
	case map[string]any:
		key, val, ok := d.oneKey(path, x, "{batched: {size: N}}")
		if !ok {
			return false
		}
		kp := messages.JoinPath(path, key)
		if key != messages.CollectBatched {
			d.addf(kp, "unknown mode (the object form is {batched: {size: N}}; write aggregate or immediate as a string)%s", suggestion(key, []string{messages.CollectBatched}))
			return false
		}
		c.Mode = messages.CollectBatched
		var p struct {
			Size *int `json:"size"`
		}
		if val != nil {
			d.value(kp, val, reflect.ValueOf(&p).Elem())
		}
		if p.Size != nil {
			c.BatchSize = *p.Size
		}
	default:
		d.typeErr(path, "aggregate, immediate or {batched: {size: N}}", v)
		return false
	}
	rv.Set(reflect.ValueOf(c))
	return true
}

// ---- BudgetValue ----

const budgetForms = `a non-negative integer or a percentage such as "10%"`

func decodeBudgetHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var b messages.BudgetValue
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if num, ok := strings.CutSuffix(s, "%"); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.addf(path, "invalid percentage %q (want a number from 0 to 100 followed by %%, e.g. \"10%%\")", x)
				return false
			}
			b.Percent, b.IsPercent = f, true
			break
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || int64(int(n)) != n {
			d.addf(path, "expected %s, got %s", budgetForms, jsonnode.Describe(v))
			return false
		}
		b.Count = int(n)
	default:
		if _, ok := v.(json.Number); !ok {
			d.typeErr(path, budgetForms, v)
			return false
		}
		n, err := jsonnode.AsInt(v)
		if err != nil || int64(int(n)) != n {
			d.addf(path, "expected %s, got %s", budgetForms, jsonnode.Describe(v))
			return false
		}
		b.Count = int(n)
	}
	rv.Set(reflect.ValueOf(b))
	return true
}
