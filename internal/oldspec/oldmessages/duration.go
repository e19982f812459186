package oldmessages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in humantime form: a sequence of
// number+unit pairs such as "500ms", "30s", "2m30s", "1h30m" or "1d". Units:
// ns, us (µs), ms, s, m, h, d (24h), w (7d); numbers may have a fraction
// ("1.5s"); "0" alone means zero. It also decodes the {secs, nanos} object
// form used by some tools. It marshals back to humantime ("1h30m").
type Duration time.Duration

// ErrBadDuration is wrapped by every duration parse error.
var ErrBadDuration = errors.New("invalid duration")

var durationUnits = []struct {
	name string
	d    time.Duration
}{
	{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ms", time.Millisecond},
	{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour},
}

const unitsHint = "use ns, us, ms, s, m, h, d or w, e.g. \"30s\""

// ParseDuration parses a humantime duration. Negative durations are rejected.
// The arithmetic is exact on integers, so ParseDuration(d.String()) == d
// for every non-negative d.
func ParseDuration(s string) (Duration, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", ErrBadDuration)
	}
	if s == "0" {
		return 0, nil
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("%w %q: must not be negative", ErrBadDuration, orig)
	}
	tooLarge := func() error {
		return fmt.Errorf("%w %q: too large (max %s)", ErrBadDuration, orig, Duration(math.MaxInt64))
	}
	var total int64
	sawUnit := false
	for len(s) > 0 {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("%w %q: expected a number at %q", ErrBadDuration, orig, s)
		}
		num := s[:i]
		intPart, fracPart, _ := strings.Cut(num, ".")
		if strings.Contains(fracPart, ".") || intPart == "" && fracPart == "" {
			return 0, fmt.Errorf("%w %q: bad number %q", ErrBadDuration, orig, num)
		}
		s = strings.TrimLeft(s[i:], " ")
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == ' ' || s[j] == '.') {
			j++
		}
		word := s[:j]
		if word == "" {
			return 0, fmt.Errorf("%w %q: missing unit after %q (%s)", ErrBadDuration, orig, num, unitsHint)
		}
		unit := time.Duration(0)
		for _, u := range durationUnits {
			if word == u.name {
				unit = u.d
				break
			}
		}
		if unit == 0 {
			return 0, fmt.Errorf("%w %q: unknown unit %q (%s)", ErrBadDuration, orig, word, unitsHint)
		}
		s = s[j:]
		// Integer part, exactly.
		var v int64
		for k := 0; k < len(intPart); k++ {
			if v > (math.MaxInt64-9)/10 {
				return 0, tooLarge()
			}
			v = v*10 + int64(intPart[k]-'0')
		}
		if v > math.MaxInt64/int64(unit) {
			return 0, tooLarge()
		}
		v *= int64(unit)
		// Fraction part, rounded to the nearest nanosecond.
		if fracPart != "" {
			var f, scale int64 = 0, 1
			for k := 0; k < len(fracPart) && scale < 1e17; k++ {
				f = f*10 + int64(fracPart[k]-'0')
				scale *= 10
			}
			add := int64(math.Round(float64(f) * (float64(unit) / float64(scale))))
			if v > math.MaxInt64-add {
				return 0, tooLarge()
			}
			v += add
		}
		if total > math.MaxInt64-v {
			return 0, tooLarge()
		}
		total += v
		sawUnit = true
	}
	if !sawUnit {
		return 0, fmt.Errorf("%w %q: missing unit (%s)", ErrBadDuration, orig, unitsHint)
	}
	return Duration(total), nil
}

// MustDuration parses s or panics; for tests and constants.
func MustDuration(s string) Duration {
	d, err := ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d in humantime form: "0s", "500ms", "1m30s", "1d2h".
func (d Duration) String() string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	v := time.Duration(d)
	if v < 0 {
		b.WriteByte('-')
		if v == math.MinInt64 {
			return time.Duration(v).String()
		}
		v = -v
	}
	for _, u := range []struct {
		name string
		d    time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond}, {"ns", time.Nanosecond}} {
		if v >= u.d {
			b.WriteString(strconv.FormatInt(int64(v/u.d), 10))
			b.WriteString(u.name)
			v %= u.d
		}
	}
	return b.String()
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes the humantime string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a humantime string, a {secs, nanos} object, or the
// number 0.
func (d *Duration) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadDuration, err)
	}
	if v == nil {
		return nil // like encoding/json: null leaves the value unchanged
	}
	nd, err := durationFromTree(v)
	if err != nil {
		return err
	}
	*d = nd
	return nil
}

// durationFromTree decodes a duration from a generic JSON/YAML value: a
// humantime string, a {secs, nanos} object, or the number 0.
func durationFromTree(v any) (Duration, error) {
	switch x := v.(type) {
	case string:
		return ParseDuration(x)
	case map[string]any:
		var secs, nanos *int64
		for _, k := range sortedKeys(x) {
			n, err := asInt(x[k])
			if err != nil {
				return 0, fmt.Errorf("%w: {secs, nanos} form: %s: %v", ErrBadDuration, k, err)
			}
			switch k {
			case "secs":
				secs = &n
			case "nanos":
				nanos = &n
			default:
				return 0, fmt.Errorf("%w: {secs, nanos} form: unknown field %q", ErrBadDuration, k)
			}
		}
		return DurationFromSecsNanos(secs, nanos)
	}
	if isNumber(v) {
		if f, err := asFloat(v); err == nil && f == 0 {
			return 0, nil
		}
		n := numberText(v)
		return 0, fmt.Errorf("%w: bare number %s: write a string with a unit, e.g. \"%ss\"", ErrBadDuration, n, n)
	}
	return 0, fmt.Errorf("%w: want a string such as \"30s\" or {secs, nanos}, got %s", ErrBadDuration, describe(v))
}

// DurationFromSecsNanos builds a Duration from the {secs, nanos} form.
func DurationFromSecsNanos(secs, nanos *int64) (Duration, error) {
	if secs == nil && nanos == nil {
		return 0, fmt.Errorf("%w: {secs, nanos} form needs secs", ErrBadDuration)
	}
	var s, n int64
	if secs != nil {
		s = *secs
	}
	if nanos != nil {
		n = *nanos
	}
	if s < 0 || n < 0 || n >= 1e9 {
		return 0, fmt.Errorf("%w: {secs: %d, nanos: %d}: secs must be >= 0 and nanos in [0, 1e9)", ErrBadDuration, s, n)
	}
	if s > math.MaxInt64/int64(time.Second)-1 {
		return 0, fmt.Errorf("%w: {secs: %d}: too large", ErrBadDuration, s)
	}
	return Duration(time.Duration(s)*time.Second + time.Duration(n)), nil
}
