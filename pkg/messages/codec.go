package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file holds the wire form of the spec types that have several forms
// in a job spec (docs/job-spec.md, "Values"). MarshalJSON writes the
// canonical form: the variant's name when it has no parameters, else a
// one-key object. UnmarshalJSON reads that form back, as the coordinator
// stores specs in KV and agents read them; it does not validate further.
// The other forms a user may write are read by package jobspec, with the
// path of every problem.

// errNotCanonical is wrapped by the errors of UnmarshalJSON.
var errNotCanonical = errors.New("messages: not the canonical form")

// variant reads the canonical form of a type with several forms: a JSON
// string naming the variant, or an object whose one key names it and
// whose value is decoded into params. object says which it was.
func variant(data []byte, what string, params any) (name string, object bool, err error) {
	if json.Unmarshal(data, &name) == nil {
		return name, false, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) == nil && len(obj) == 1 {
		for name, raw := range obj {
			return name, true, json.Unmarshal(raw, params)
		}
	}
	return "", false, fmt.Errorf("%w of a %s: %s", errNotCanonical, what, data)
}

// Known reports whether k is one of the Backoff* strategies.
func (k BackoffKind) Known() bool {
	switch k {
	case BackoffFixed, BackoffLinear, BackoffExponential, BackoffFibonacci, BackoffCustom:
		return true
	}
	return false
}

// MarshalJSON writes the strategy name, or {kind: {params}} when b has
// parameters: {"fixed": {"delay"}}, {"linear": {"initial", "increment"}},
// {"exponential": {"initial", "base"}}, {"fibonacci": {"initial"}},
// {"custom": {"delays"}}.
func (b Backoff) MarshalJSON() ([]byte, error) {
	if b.Base == 0 && b.Increment == nil && len(b.Delays) == 0 && b.Initial == nil {
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

// UnmarshalJSON reads what MarshalJSON writes.
func (b *Backoff) UnmarshalJSON(data []byte) error {
	var p struct {
		Delay, Initial, Increment *Duration
		Base                      float64
		Delays                    []Duration
	}
	name, _, err := variant(data, "backoff", &p)
	if err != nil {
		return err
	}
	if kind := BackoffKind(name); !kind.Known() {
		return fmt.Errorf("%w of a backoff: unknown strategy %q", errNotCanonical, name)
	}
	if name == string(BackoffFixed) {
		p.Initial = p.Delay
	}
	*b = Backoff{Kind: BackoffKind(name), Base: p.Base, Increment: p.Increment, Delays: p.Delays, Initial: p.Initial}
	return nil
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

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Matcher) UnmarshalJSON(data []byte) error {
	var raw json.RawMessage
	name, object, err := variant(data, "matcher", &raw)
	if err != nil || !object {
		*m = Matcher{Builtin: name}
		return err
	}
	var out Matcher
	switch name {
	case "pattern":
		err = json.Unmarshal(raw, &out.Pattern)
	case "exit_code":
		err = json.Unmarshal(raw, &out.ExitCodes)
	}
	if err == nil && out.Pattern == "" && len(out.ExitCodes) == 0 {
		err = fmt.Errorf("%w of a matcher: %s", errNotCanonical, data)
	}
	*m = out
	return err
}

// MarshalJSON writes "stop", "continue", {"fallback": {"command": ...}}
// or {"fallback": {"claude": ...}}, the fallback's options beside its
// command.
func (f OnFailure) MarshalJSON() ([]byte, error) {
	if f.Action == OnFailureFallback {
		key := "command"
		if f.Claude {
			key = "claude"
		}
		p := map[string]any{key: f.Fallback}
		if len(f.Steps) > 0 {
			p = map[string]any{"steps": f.Steps}
		}
		if f.CommitRequired {
			p["commit_required"] = true
		}
		if f.FailWorkflow {
			p["fail_workflow"] = true
		}
		if f.MaxAttempts > 1 {
			p["max_attempts"] = f.MaxAttempts
		}
		if f.HandlerFailureFatal {
			p["handler_failure_fatal"] = true
		}
		if f.Timeout > 0 {
			p["timeout"] = f.Timeout
		}
		return json.Marshal(map[string]map[string]any{OnFailureFallback: p})
	}
	return json.Marshal(f.Action)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *OnFailure) UnmarshalJSON(data []byte) error {
	var p struct {
		Command, Claude     string
		CommitRequired      bool `json:"commit_required"`
		FailWorkflow        bool `json:"fail_workflow"`
		Steps               []Step
		MaxAttempts         int      `json:"max_attempts"`
		HandlerFailureFatal bool     `json:"handler_failure_fatal"`
		Timeout             Duration `json:"timeout"`
	}
	name, _, err := variant(data, "step failure action", &p)
	*f = OnFailure{Action: name, Fallback: p.Command, CommitRequired: p.CommitRequired, FailWorkflow: p.FailWorkflow, Steps: p.Steps,
		MaxAttempts: p.MaxAttempts, HandlerFailureFatal: p.HandlerFailureFatal, Timeout: p.Timeout}
	if p.Claude != "" && p.Command == "" {
		f.Fallback, f.Claude = p.Claude, true
	}
	return err
}

// MarshalJSON writes the action name, or {"custom": step}.
func (a ItemFailureAction) MarshalJSON() ([]byte, error) {
	if a.Action == ItemFailureCustom {
		return json.Marshal(map[string]*Step{ItemFailureCustom: a.Custom})
	}
	return json.Marshal(a.Action)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *ItemFailureAction) UnmarshalJSON(data []byte) error {
	var step *Step
	name, _, err := variant(data, "item failure action", &step)
	*a = ItemFailureAction{Action: name, Custom: step}
	return err
}

// MarshalJSON writes "aggregate", "immediate" or {"batched": {"size": N}}.
func (c ErrorCollection) MarshalJSON() ([]byte, error) {
	if c.Mode == CollectBatched {
		return json.Marshal(map[string]map[string]int{CollectBatched: {"size": c.BatchSize}})
	}
	return json.Marshal(c.Mode)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *ErrorCollection) UnmarshalJSON(data []byte) error {
	var p struct{ Size *int }
	name, _, err := variant(data, "error collection", &p)
	if err == nil && name == CollectBatched && p.Size == nil {
		err = fmt.Errorf("%w of an error collection: batched without a size", errNotCanonical)
	}
	*c = ErrorCollection{Mode: name}
	if p.Size != nil {
		c.BatchSize = *p.Size
	}
	return err
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

// UnmarshalJSON reads what MarshalJSON writes.
func (b *BudgetValue) UnmarshalJSON(data []byte) error {
	var s string
	if json.Unmarshal(data, &s) != nil {
		var n int
		if err := json.Unmarshal(data, &n); err != nil {
			return err
		}
		*b = BudgetValue{Count: n}
		return nil
	}
	num, ok := strings.CutSuffix(s, "%")
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil {
		return fmt.Errorf("%w of a budget: %s", errNotCanonical, data)
	}
	*b = BudgetValue{Percent: f, IsPercent: true}
	return nil
}
