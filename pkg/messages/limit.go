package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a number of calls per second. It is written "40/s", "600/m" or
// "1000/h" (a bare number is per second) and read back as such.
type Rate float64

// MaxRate bounds a limit's rate: 1,000,000 calls per second.
const MaxRate = 1e6

// ParseRate parses "N/s", "N/m", "N/h" or a bare N (per second). N is a
// positive decimal number.
func ParseRate(s string) (Rate, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	per := 1.0
	switch strings.TrimSpace(unit) {
	case "", "s", "sec", "second":
	case "m", "min", "minute":
		per = 60
	case "h", "hour":
		per = 3600
	default:
		return 0, fmt.Errorf("rate %q: unknown unit %q (use /s, /m or /h)", s, unit)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("rate %q: want a number of calls per /s, /m or /h, e.g. 40/s", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("rate %q: must be positive", s)
	}
	r := Rate(n / per)
	if r > MaxRate {
		return 0, fmt.Errorf("rate %q: at most %g/s", s, float64(MaxRate))
	}
	return r, nil
}

// PerSecond is the rate in calls per second.
func (r Rate) PerSecond() float64 { return float64(r) }

// String writes the rate per second, e.g. "40/s" or "0.5/s".
func (r Rate) String() string { return strconv.FormatFloat(float64(r), 'g', -1, 64) + "/s" }

// MarshalText writes String.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads ParseRate's forms.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// UnmarshalJSON reads a string form or a bare number (per second).
func (r *Rate) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		if f <= 0 || f > MaxRate {
			return fmt.Errorf("rate %v: want a positive number of calls per second up to %g", f, float64(MaxRate))
		}
		*r = Rate(f)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`rate: want a string such as "40/s" or a number per second`)
	}
	return r.UnmarshalText([]byte(s))
}

// LimitConfig is what an operator sets on a named limit (fleetctl limit
// set), or what a step's inline limit says.
type LimitConfig struct {
	// Rate is the calls per second the limit allows; 0 = no rate limit.
	Rate Rate `json:"rate,omitempty"`
	// Burst is how many calls may start at once after a quiet period.
	// Defaults to one second of Rate (at least 1).
	Burst int `json:"burst,omitempty"`
	// Concurrency caps the calls in flight across the fleet; 0 = no cap.
	Concurrency int `json:"concurrency,omitempty"`
	// Adaptive lowers the rate on overload failures and raises it back on
	// successes (AIMD).
	Adaptive bool `json:"adaptive,omitempty"`
	// Pool restricts a named limit to one pool's agents; empty = any pool.
	Pool string `json:"pool,omitempty"`
}

// Bounds of a limit's configuration.
const (
	MaxLimitBurst       = 1_000_000
	MaxLimitConcurrency = 100_000
	// MaxLimitNameBytes bounds a limit's name; MaxLimitKeyBytes a step's
	// expanded limit key.
	MaxLimitNameBytes = 64
	MaxLimitKeyBytes  = 512
)

// WithDefaults fills Burst: one second of Rate, at least 1.
func (c LimitConfig) WithDefaults() LimitConfig {
	if c.Burst == 0 && c.Rate > 0 {
		c.Burst = max(1, int(math.Ceil(float64(c.Rate))))
	}
	return c
}

// Validate reports every bad field, with paths under prefix.
func (c LimitConfig) Validate(prefix string) []FieldError {
	var errs []FieldError
	add := func(f, format string, args ...any) {
		errs = append(errs, FieldError{Field: JoinPath(prefix, f), Message: fmt.Sprintf(format, args...)})
	}
	if c.Rate < 0 || c.Rate > MaxRate || math.IsNaN(float64(c.Rate)) {
		add("rate", "must be between 0 and %g/s, got %v", float64(MaxRate), float64(c.Rate))
	}
	if c.Burst < 0 || c.Burst > MaxLimitBurst {
		add("burst", "must be between 0 and %d, got %d", MaxLimitBurst, c.Burst)
	}
	if c.Burst > 0 && c.Rate == 0 {
		add("burst", "only allowed with rate")
	}
	if c.Concurrency < 0 || c.Concurrency > MaxLimitConcurrency {
		add("concurrency", "must be between 0 and %d, got %d", MaxLimitConcurrency, c.Concurrency)
	}
	if c.Rate == 0 && c.Concurrency == 0 {
		add("rate", "set rate, concurrency or both")
	}
	if c.Adaptive && c.Rate == 0 {
		add("adaptive", "needs a rate")
	}
	if c.Pool != "" {
		if err := ValidPool(c.Pool); err != nil {
			add("pool", "%v", err)
		}
	}
	return errs
}

// ValidLimitName checks a named limit's name: a subject token of at most
// MaxLimitNameBytes.
func ValidLimitName(name string) error {
	if len(name) > MaxLimitNameBytes {
		return fmt.Errorf("at most %d bytes, got %d", MaxLimitNameBytes, len(name))
	}
	return ValidToken(name)
}

// StepLimit is a step's limit: a named limit (`limit: NAME`), or an
// inline one whose key is a template over the item (`limit: {key:
// "api:${item.host}", rate: 40/s, concurrency: 6}`), one limit per
// expanded key, shared by every job that uses the same key.
type StepLimit struct {
	// Name is a named limit, configured with fleetctl limit set.
	Name string `json:"name,omitempty"`
	// Key is the inline limit's key template.
	Key string `json:"key,omitempty"`
	LimitConfig
}

// MarshalJSON writes a named limit as its name.
func (l StepLimit) MarshalJSON() ([]byte, error) {
	if l.Name != "" && l.Key == "" && l.LimitConfig == (LimitConfig{}) {
		return json.Marshal(l.Name)
	}
	type plain StepLimit
	return json.Marshal(plain(l))
}

// UnmarshalJSON reads a name or the object form.
func (l *StepLimit) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*l = StepLimit{Name: name}
		return nil
	}
	type plain StepLimit
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*l = StepLimit(p)
	return nil
}
