package simulate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Variant is a what-if to compare with the job as written: overrides of
// its spec and of the fleet, written "key=value; key=value", e.g.
// "retry_budget=5%", "jitter=full", "attempts=3; backoff=fixed",
// "circuit_breaker={failure_threshold: 5, timeout: 10s}", "agents=8".
//
// A value is YAML ("5%", "10s", 3, {…}, [ … ]; null removes the field).
// The key "name" names the variant in tables and legends (by default the
// variant as written): "name=breaker; circuit_breaker=on".
// The keys (see [VariantKeys]) are the job's retry fields, those of the
// dependency step's retry_config and timeout, error_policy's, and the
// fleet's; any other field of the spec is reached by its path, e.g.
// "error_policy.circuit_breaker.timeout=10s" or
// "agent_template[1].retry_config.attempts=2". An overridden spec is
// checked as a submitted one is, so a bad value is reported with its field
// path. A Variant is immutable once parsed and safe for concurrent use.
type Variant struct {
	// Name is the variant's "name", or the variant as written (blanks
	// trimmed).
	Name      string
	Overrides []Override
}

// Override is one key=value of a Variant; a plain value.
type Override struct {
	Key   string
	Value string
}

// ErrVariant is wrapped by the errors of ParseVariant and Variant.Apply.
var ErrVariant = errors.New("simulate: invalid variant")

// variantKey says where a key of a Variant goes.
type variantKey struct {
	path  string // path under the spec, "" for a fleet key
	step  bool   // path is under the dependency step (agent_template[i].)
	fleet func(f *Fleet, n int)
	about string
}

var variantKeys = map[string]variantKey{
	"retry_budget":          {path: "retry_budget", about: "the job retry budget: a count or a percentage of the items"},
	"retry_budget_per_item": {path: "retry_budget_per_item", about: "the per-item cap"},
	"max_parallel":          {path: "max_parallel", about: "the job's in-flight cap"},
	"attempts":              {path: "retry_config.attempts", step: true, about: "the dependency step's attempts"},
	"backoff":               {path: "retry_config.backoff", step: true, about: "its backoff strategy"},
	"initial_delay":         {path: "retry_config.initial_delay", step: true, about: "its initial delay"},
	"max_delay":             {path: "retry_config.max_delay", step: true, about: "its max delay"},
	"jitter": {path: "retry_config.jitter", step: true,
		about: "full, equal, decorrelated, proportional, or none"},
	"jitter_factor":     {path: "retry_config.jitter_factor", step: true, about: "its proportional jitter width"},
	"jitter_mode":       {path: "retry_config.jitter_mode", step: true, about: "its jitter mode"},
	"retry_on":          {path: "retry_config.retry_on", step: true, about: "its error matchers"},
	"step_retry_budget": {path: "retry_config.retry_budget", step: true, about: "its duration budget"},
	"on_failure":        {path: "retry_config.on_failure", step: true, about: "its on_failure"},
	"timeout":           {path: "timeout", step: true, about: "its timeout"},
	"limit": {path: "limit", step: true,
		about: "its limit: {key: api, rate: 40/s, burst: 10, concurrency: 6, adaptive: true}, or null for none"},
	"circuit_breaker": {path: "error_policy.circuit_breaker",
		about: "the job's breaker: {failure_threshold, …}, on (defaults) or off"},
	"on_item_failure":   {path: "error_policy.on_item_failure", about: "dlq, skip, stop, retry or {custom: …}"},
	"max_failures":      {path: "error_policy.max_failures", about: "stop the job after N failures"},
	"failure_threshold": {path: "error_policy.failure_threshold", about: "stop the job above this failure rate"},
	"agents":            {fleet: func(f *Fleet, n int) { f.Agents = n }, about: "agents"},
	"concurrency":       {fleet: func(f *Fleet, n int) { f.Concurrency = n }, about: "items per agent"},
	"prefetch":          {fleet: func(f *Fleet, n int) { f.Prefetch = n }, about: "messages buffered per agent"},
	"max_deliver":       {fleet: func(f *Fleet, n int) { f.MaxDeliver = n }, about: "the consumer's MaxDeliver"},
	"max_ack_pending":   {fleet: func(f *Fleet, n int) { f.MaxAckPending = n }, about: "the consumer's MaxAckPending"},
}

// VariantKeys lists the keys a Variant understands, each with what it
// sets, sorted.
func VariantKeys() []string {
	out := make([]string, 0, len(variantKeys)+1)
	for k, v := range variantKeys {
		out = append(out, k+": "+v.about)
	}
	out = append(out, "name: what tables and legends call the variant")
	slices.Sort(out)
	return out
}

// ParseVariant reads "key=value; key=value".
func ParseVariant(s string) (Variant, error) {
	v := Variant{Name: strings.TrimSpace(s)}
	for _, part := range splitOverrides(s) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, value, ok := strings.Cut(part, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" {
			return Variant{}, fmt.Errorf("%w: %q: want key=value", ErrVariant, part)
		}
		if key == "name" {
			if value == "" {
				return Variant{}, fmt.Errorf("%w: %q: an empty name", ErrVariant, part)
			}
			v.Name = value
			continue
		}
		if _, known := variantKeys[key]; !known && !strings.ContainsAny(key, ".[") {
			return Variant{}, fmt.Errorf("%w: unknown key %q (want one of %s, or a spec field path such as error_policy.circuit_breaker.timeout)",
				ErrVariant, key, strings.Join(sortedKeys(), ", "))
		}
		v.Overrides = append(v.Overrides, Override{Key: key, Value: value})
	}
	if len(v.Overrides) == 0 {
		return Variant{}, fmt.Errorf("%w: %q: no key=value", ErrVariant, s)
	}
	return v, nil
}

// splitOverrides splits at the semicolons outside brackets and quotes.
func splitOverrides(s string) []string {
	var parts []string
	depth, start := 0, 0
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '{' || r == '[':
			depth++
		case r == '}' || r == ']':
			depth--
		case r == ';' && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func sortedKeys() []string { return slices.Sorted(maps.Keys(variantKeys)) }

// Apply returns cfg with v's overrides: its spec (a copy; cfg.Spec is not
// changed) and its fleet. An override that makes the spec invalid is
// reported with the field's path, in a *messages.ValidationError.
func (v Variant) Apply(cfg Config) (Config, error) {
	if cfg.Spec == nil {
		return cfg, fmt.Errorf("%w: no spec", ErrVariant)
	}
	var doc map[string]any
	if err := roundTrip(cfg.Spec, &doc); err != nil {
		return cfg, err
	}
	specChanged := false
	for _, o := range v.Overrides {
		val, err := yamlValue(o.Value)
		if err != nil {
			return cfg, fmt.Errorf("%w: %s: %v", ErrVariant, o.Key, err)
		}
		k, known := variantKeys[o.Key]
		if known && k.fleet != nil {
			n, ok := val.(int)
			if !ok {
				return cfg, fmt.Errorf("%w: %s: %q is not a whole number", ErrVariant, o.Key, o.Value)
			}
			k.fleet(&cfg.Fleet, n)
			continue
		}
		path := o.Key
		if known {
			path = k.path
			if k.step {
				path = messages.IndexPath("agent_template", cfg.Dependency.Step) + "." + path
			}
		}
		specChanged = true
		switch {
		case o.Key == "jitter":
			err = setJitter(doc, strings.TrimSuffix(path, ".jitter"), val)
		case o.Key == "circuit_breaker" && (val == "off" || val == "none" || val == false):
			err = setPath(doc, path, nil)
		case o.Key == "circuit_breaker" && (val == "on" || val == true):
			err = setPath(doc, path, map[string]any{})
		default:
			err = setPath(doc, path, val)
		}
		if err != nil {
			return cfg, fmt.Errorf("%w: %s: %v", ErrVariant, o.Key, err)
		}
	}
	if !specChanged {
		return cfg, nil
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrVariant, err)
	}
	spec, err := jobspec.Parse(data)
	if err != nil {
		var ve *messages.ValidationError
		if errors.As(err, &ve) {
			for i := range ve.Problems {
				ve.Problems[i].Line = 0 // lines of a generated document mean nothing
			}
			ve.Kind = "variant " + strconv.Quote(v.Name)
			return cfg, ve
		}
		return cfg, fmt.Errorf("%w: %v", ErrVariant, err)
	}
	cfg.Spec = spec
	return cfg, nil
}

// setJitter sets a retry_config's jitter: a mode turns it on in that mode,
// none (off, false) turns it off, true turns on the default mode.
func setJitter(doc map[string]any, rc string, val any) error {
	switch val {
	case "none", "off", false:
		if err := setPath(doc, rc+".jitter_mode", nil); err != nil {
			return err
		}
		return setPath(doc, rc+".jitter", nil)
	case "on", true:
		return setPath(doc, rc+".jitter", true)
	}
	if err := setPath(doc, rc+".jitter", true); err != nil {
		return err
	}
	return setPath(doc, rc+".jitter_mode", val)
}

// roundTrip converts v to a generic JSON document.
func roundTrip(v any, out *map[string]any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrVariant, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%w: %v", ErrVariant, err)
	}
	return nil
}

// yamlValue reads one YAML value ("" is null).
func yamlValue(s string) (any, error) {
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("%q is not a YAML value: %v", s, err)
	}
	return v, nil
}

// setPath sets (or, for nil, removes) the field at path ("a.b[2].c") of
// doc, creating the objects on the way.
func setPath(doc map[string]any, path string, val any) error {
	tokens, err := splitPath(path)
	if err != nil {
		return err
	}
	var cur any = doc
	for i, t := range tokens {
		last := i == len(tokens)-1
		switch c := cur.(type) {
		case map[string]any:
			name, ok := t.(string)
			if !ok {
				return fmt.Errorf("%s: not a list", joinTokens(tokens[:i]))
			}
			if last {
				if val == nil {
					delete(c, name)
				} else {
					c[name] = val
				}
				return nil
			}
			next, ok := c[name]
			if !ok || next == nil {
				if _, isIndex := tokens[i+1].(int); isIndex {
					return fmt.Errorf("%s: no such list", joinTokens(tokens[:i+1]))
				}
				next = map[string]any{}
				c[name] = next
			}
			cur = next
		case []any:
			idx, ok := t.(int)
			if !ok {
				return fmt.Errorf("%s: is a list, not an object", joinTokens(tokens[:i]))
			}
			if idx < 0 || idx >= len(c) {
				return fmt.Errorf("%s: no such element (the list has %d)", joinTokens(tokens[:i+1]), len(c))
			}
			if last {
				if val == nil {
					return fmt.Errorf("%s: a list element cannot be removed", joinTokens(tokens[:i+1]))
				}
				c[idx] = val
				return nil
			}
			cur = c[idx]
		default:
			return fmt.Errorf("%s: not an object", joinTokens(tokens[:i]))
		}
	}
	return nil
}

// splitPath splits "a.b[2].c" into "a", "b", 2, "c".
func splitPath(path string) ([]any, error) {
	var out []any
	for _, part := range strings.Split(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name == "" && (len(out) == 0 || rest == "") {
			return nil, fmt.Errorf("bad path %q", path)
		}
		if name != "" {
			out = append(out, name)
		}
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			n, err := strconv.Atoi(num)
			if !ok || err != nil {
				return nil, fmt.Errorf("bad index in path %q", path)
			}
			out = append(out, n)
			rest = strings.TrimPrefix(after, "[")
			if after != "" && !strings.HasPrefix(after, "[") {
				return nil, fmt.Errorf("bad path %q", path)
			}
		}
	}
	return out, nil
}

func joinTokens(tokens []any) string {
	var b strings.Builder
	for _, t := range tokens {
		switch x := t.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", x)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(x)
		}
	}
	return b.String()
}
