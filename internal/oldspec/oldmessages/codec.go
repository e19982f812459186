package oldmessages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// This file holds the JSON forms of the polymorphic spec types. Each has a
// decode hook used by the strict decoder, an UnmarshalJSON built on the same
// hook (so that json.Unmarshal of a stored spec accepts every form), and a
// MarshalJSON writing the canonical form: the shorthand string when there
// are no parameters, else a one-key object.

// unmarshalVia decodes JSON text with the strict decoder's hook for rv's type.
func unmarshalVia(b []byte, rv reflect.Value) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	d := newDecoder()
	d.value("", v, rv)
	return d.err()
}

func decodeDurationHook(d *decoder, path string, v any, rv reflect.Value) bool {
	dur, err := durationFromTree(v)
	if err != nil {
		d.addf(path, "%v", err)
		return false
	}
	rv.SetInt(int64(dur))
	return true
}

func decodeRawHook(d *decoder, path string, v any, rv reflect.Value) bool {
	if raw, ok := v.(json.RawMessage); ok {
		b, err := CompactJSON(raw)
		if err != nil {
			d.addf(path, "invalid JSON: %v", err)
			return false
		}
		rv.SetBytes(b)
		return true
	}
	n, fe := normalize(path, v, 0)
	if fe != nil {
		d.addf(fe.Field, "%s", fe.Message)
		return false
	}
	b, err := canonicalJSON(n)
	if err != nil {
		d.addf(path, "%v", err)
		return false
	}
	rv.SetBytes(b)
	return true
}

// ---- Backoff ----

var backoffKinds = []string{string(BackoffFixed), string(BackoffLinear), string(BackoffExponential), string(BackoffFibonacci), string(BackoffCustom)}

const backoffForms = "a strategy name (fixed, linear, exponential, fibonacci or custom) or a one-key object such as {exponential: {base: 3}}"

func validBackoffKind(k BackoffKind) bool {
	for _, n := range backoffKinds {
		if string(k) == n {
			return true
		}
	}
	return false
}

func decodeBackoffHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var b Backoff
	switch x := v.(type) {
	case string:
		k := BackoffKind(strings.ToLower(x))
		if !validBackoffKind(k) {
			d.addf(path, "unknown backoff strategy %q (use fixed, linear, exponential, fibonacci or custom)%s", x, suggestion(x, backoffKinds))
			return false
		}
		b.Kind = k
	case map[string]any:
		key, params, ok := d.oneKey(path, x, "one key naming the strategy (fixed, linear, exponential, fibonacci or custom)")
		if !ok {
			return false
		}
		kp := JoinPath(path, key)
		b.Kind = BackoffKind(strings.ToLower(key))
		if !validBackoffKind(b.Kind) {
			d.addf(kp, "unknown backoff strategy (use fixed, linear, exponential, fibonacci or custom)%s", suggestion(key, backoffKinds))
			return false
		}
		if params == nil {
			break // {fixed: null}
		}
		switch b.Kind {
		case BackoffFixed:
			var p struct {
				Delay   *Duration `json:"delay"`
				Initial *Duration `json:"initial"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			if p.Delay != nil && p.Initial != nil {
				d.addf(JoinPath(kp, "initial"), "set delay or initial, not both")
			}
			b.Initial = p.Delay
			if b.Initial == nil {
				b.Initial = p.Initial
			}
		case BackoffLinear:
			var p struct {
				Initial   *Duration `json:"initial"`
				Increment *Duration `json:"increment"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial, b.Increment = p.Initial, p.Increment
		case BackoffExponential:
			var p struct {
				Initial    *Duration `json:"initial"`
				Base       *float64  `json:"base"`
				Multiplier *float64  `json:"multiplier"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial = p.Initial
			base, name := p.Base, "base"
			if p.Multiplier != nil {
				if p.Base != nil {
					d.addf(JoinPath(kp, "multiplier"), "set base or multiplier (its legacy name), not both")
				} else {
					base, name = p.Multiplier, "multiplier"
				}
			}
			if base != nil {
				if *base < 1 {
					d.addf(JoinPath(kp, name), "must be >= 1, got %s", strconv.FormatFloat(*base, 'g', -1, 64))
				} else {
					b.Base = *base
				}
			}
		case BackoffFibonacci:
			var p struct {
				Initial *Duration `json:"initial"`
			}
			d.value(kp, params, reflect.ValueOf(&p).Elem())
			b.Initial = p.Initial
		case BackoffCustom:
			var p struct {
				Delays []Duration `json:"delays"`
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

// hasParams reports whether b needs the object form.
func (b Backoff) hasParams() bool {
	return b.Base != 0 || b.Increment != nil || len(b.Delays) > 0 || b.Initial != nil
}

// MarshalJSON writes the strategy name, or {kind: {params}} when b has
// parameters: {"fixed": {"delay"}}, {"linear": {"initial", "increment"}},
// {"exponential": {"initial", "base"}}, {"fibonacci": {"initial"}},
// {"custom": {"delays"}}.
func (b Backoff) MarshalJSON() ([]byte, error) {
	if !b.hasParams() {
		return json.Marshal(string(b.Kind))
	}
	p := map[string]any{}
	if b.Initial != nil {
		if b.Kind == BackoffFixed {
			p["delay"] = *b.Initial
		} else {
			p["initial"] = *b.Initial
		}
	}
	if b.Base != 0 {
		p["base"] = b.Base
	}
	if b.Increment != nil {
		p["increment"] = *b.Increment
	}
	if len(b.Delays) > 0 {
		p["delays"] = b.Delays
	}
	return json.Marshal(map[string]any{string(b.Kind): p})
}

// UnmarshalJSON accepts every form of Backoff (see the type's comment).
func (b *Backoff) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(b).Elem())
}

// ---- Matcher ----

var builtinMatchers = []string{MatchNetwork, MatchTimeout, MatchServerError, MatchRateLimit}

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
	var m Matcher
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
		kp := JoinPath(path, key)
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
			} else if isNumber(val) {
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

// MarshalJSON writes the built-in name, {"pattern": ...} or {"exit_code": [...]}.
func (m Matcher) MarshalJSON() ([]byte, error) {
	switch {
	case m.Builtin != "":
		return json.Marshal(m.Builtin)
	case m.Pattern != "":
		return json.Marshal(map[string]string{"pattern": m.Pattern})
	case len(m.ExitCodes) > 0:
		return json.Marshal(map[string][]int{"exit_code": m.ExitCodes})
	}
	return nil, fmt.Errorf("messages: empty matcher")
}

// UnmarshalJSON accepts every form of Matcher.
func (m *Matcher) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(m).Elem())
}

// ---- OnFailure ----

func decodeOnFailureHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var f OnFailure
	switch x := v.(type) {
	case string:
		switch a := strings.ToLower(x); a {
		case OnFailureStop, OnFailureContinue:
			f.Action = a
		case OnFailureFallback:
			d.addf(path, `fallback needs a command: {fallback: {command: "..."}}`)
			return false
		default:
			d.addf(path, `unknown action %q (use stop, continue or {fallback: {command: "..."}})%s`, x, suggestion(a, []string{OnFailureStop, OnFailureContinue, OnFailureFallback}))
			return false
		}
	case map[string]any:
		key, val, ok := d.oneKey(path, x, `{fallback: {command: "..."}}`)
		if !ok {
			return false
		}
		kp := JoinPath(path, key)
		if key != OnFailureFallback {
			d.addf(kp, `unknown action (the object form is {fallback: {command: "..."}}; write stop or continue as a string)%s`, suggestion(key, []string{OnFailureFallback}))
			return false
		}
		f.Action = OnFailureFallback
		var p struct {
			Command *string `json:"command"`
		}
		if val != nil {
			d.value(kp, val, reflect.ValueOf(&p).Elem())
		}
		if p.Command != nil {
			f.Fallback = *p.Command
		}
	default:
		d.typeErr(path, `stop, continue or {fallback: {command: "..."}}`, v)
		return false
	}
	rv.Set(reflect.ValueOf(f))
	return true
}

// MarshalJSON writes "stop", "continue" or {"fallback": {"command": ...}}.
func (f OnFailure) MarshalJSON() ([]byte, error) {
	if f.Action == OnFailureFallback {
		return json.Marshal(map[string]map[string]string{OnFailureFallback: {"command": f.Fallback}})
	}
	return json.Marshal(f.Action)
}

// UnmarshalJSON accepts every form of OnFailure.
func (f *OnFailure) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(f).Elem())
}

// ---- ItemFailureAction ----

var itemFailureActions = []string{ItemFailureDLQ, ItemFailureRetry, ItemFailureSkip, ItemFailureStop, ItemFailureCustom}

const customStepForm = `{custom: {handler: name, with: {...}}} or {custom: {shell: "..."}}`

func decodeItemFailureHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var a ItemFailureAction
	switch x := v.(type) {
	case string:
		switch s := strings.ToLower(x); s {
		case ItemFailureDLQ, ItemFailureRetry, ItemFailureSkip, ItemFailureStop:
			a.Action = s
		case ItemFailureCustom:
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
		kp := JoinPath(path, key)
		if key != ItemFailureCustom {
			d.addf(kp, "unknown action (the object form is %s; write dlq, retry, skip or stop as a string)%s", customStepForm, suggestion(key, []string{ItemFailureCustom}))
			return false
		}
		if val == nil {
			d.addf(kp, "custom needs a step: %s", customStepForm)
			return false
		}
		a.Action = ItemFailureCustom
		a.Custom = &Step{}
		d.value(kp, val, reflect.ValueOf(a.Custom).Elem())
	default:
		d.typeErr(path, "dlq, retry, skip, stop or "+customStepForm, v)
		return false
	}
	rv.Set(reflect.ValueOf(a))
	return true
}

// MarshalJSON writes the action name, or {"custom": step}.
func (a ItemFailureAction) MarshalJSON() ([]byte, error) {
	if a.Action == ItemFailureCustom {
		return json.Marshal(map[string]*Step{ItemFailureCustom: a.Custom})
	}
	return json.Marshal(a.Action)
}

// UnmarshalJSON accepts every form of ItemFailureAction.
func (a *ItemFailureAction) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(a).Elem())
}

// ---- ErrorCollection ----

func decodeErrorCollectionHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var c ErrorCollection
	modes := []string{CollectAggregate, CollectImmediate, CollectBatched}
	switch x := v.(type) {
	case string:
		switch s := strings.ToLower(x); s {
		case CollectAggregate, CollectImmediate:
			c.Mode = s
		case CollectBatched:
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
		kp := JoinPath(path, key)
		if key != CollectBatched {
			d.addf(kp, "unknown mode (the object form is {batched: {size: N}}; write aggregate or immediate as a string)%s", suggestion(key, []string{CollectBatched}))
			return false
		}
		c.Mode = CollectBatched
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

// MarshalJSON writes "aggregate", "immediate" or {"batched": {"size": N}}.
func (c ErrorCollection) MarshalJSON() ([]byte, error) {
	if c.Mode == CollectBatched {
		return json.Marshal(map[string]map[string]int{CollectBatched: {"size": c.BatchSize}})
	}
	return json.Marshal(c.Mode)
}

// UnmarshalJSON accepts every form of ErrorCollection.
func (c *ErrorCollection) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(c).Elem())
}

// ---- BudgetValue ----

const budgetForms = `a non-negative integer or a percentage such as "10%"`

func decodeBudgetHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var b BudgetValue
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
			d.addf(path, "expected %s, got %s", budgetForms, describe(v))
			return false
		}
		b.Count = int(n)
	default:
		if !isNumber(v) {
			d.typeErr(path, budgetForms, v)
			return false
		}
		n, err := asInt(v)
		if err != nil || int64(int(n)) != n {
			d.addf(path, "expected %s, got %s", budgetForms, describe(v))
			return false
		}
		b.Count = int(n)
	}
	rv.Set(reflect.ValueOf(b))
	return true
}

// String writes "10%" or "20".
func (b BudgetValue) String() string {
	if b.IsPercent {
		return strconv.FormatFloat(b.Percent, 'f', -1, 64) + "%"
	}
	return strconv.Itoa(b.Count)
}

// MarshalJSON writes a number, or a string "10%" for a percentage.
func (b BudgetValue) MarshalJSON() ([]byte, error) {
	if b.IsPercent {
		return json.Marshal(b.String())
	}
	return json.Marshal(b.Count)
}

// UnmarshalJSON accepts a count (number or numeric string) or "N%".
func (b *BudgetValue) UnmarshalJSON(data []byte) error {
	return unmarshalVia(data, reflect.ValueOf(b).Elem())
}
