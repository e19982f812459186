package messages

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
	// Longest names first so "ms" wins over "m".
	{"ms", time.Millisecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ns", time.Nanosecond},
	{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour},
}

// ParseDuration parses a humantime duration. Negative durations are rejected.
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
	var total float64
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
		num, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("%w %q: bad number %q", ErrBadDuration, orig, s[:i])
		}
		s = strings.TrimLeft(s[i:], " ")
		unit := time.Duration(0)
		for _, u := range durationUnits {
			if strings.HasPrefix(s, u.name) {
				unit, s = u.d, s[len(u.name):]
				break
			}
		}
		if unit == 0 {
			if s == "" {
				return 0, fmt.Errorf("%w %q: missing unit (use ns, us, ms, s, m, h, d or w, e.g. \"30s\")", ErrBadDuration, orig)
			}
			return 0, fmt.Errorf("%w %q: unknown unit at %q (use ns, us, ms, s, m, h, d or w)", ErrBadDuration, orig, s)
		}
		// A unit must be followed by a digit, a space or the end ("5mins" is not "5m"+"ins").
		if s != "" && !(s[0] >= '0' && s[0] <= '9' || s[0] == ' ' || s[0] == '.') {
			return 0, fmt.Errorf("%w %q: unknown unit at %q (use ns, us, ms, s, m, h, d or w)", ErrBadDuration, orig, s)
		}
		total += num * float64(unit)
		sawUnit = true
		if total > float64(math.MaxInt64) {
			return 0, fmt.Errorf("%w %q: too large (max %s)", ErrBadDuration, orig, Duration(math.MaxInt64))
		}
	}
	if !sawUnit {
		return 0, fmt.Errorf("%w %q: missing unit", ErrBadDuration, orig)
	}
	return Duration(math.Round(total)), nil
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

// UnmarshalJSON accepts a humantime string or a {secs, nanos} object.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var sn struct {
			Secs  *int64 `json:"secs"`
			Nanos *int64 `json:"nanos"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sn); err != nil {
			return fmt.Errorf("%w: {secs, nanos} form: %v", ErrBadDuration, err)
		}
		v, err := DurationFromSecsNanos(sn.Secs, sn.Nanos)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		if len(b) > 0 && (b[0] >= '0' && b[0] <= '9' || b[0] == '-') {
			return fmt.Errorf("%w: bare number %s: write a string with a unit, e.g. \"%ss\"", ErrBadDuration, b, b)
		}
		return fmt.Errorf("%w: want a string such as \"30s\" or {secs, nanos}, got %s", ErrBadDuration, b)
	}
	return d.UnmarshalText([]byte(s))
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
