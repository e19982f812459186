package messages

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in humantime form: a sequence of
// number+unit pairs such as "500ms", "30s", "2m30s", "1h30m" or "1d". Units:
// ns, us (µs), ms, s, m, h, d (24h), w (7d); numbers may have a fraction
// ("1.5s"); "0" alone means zero. Its JSON and YAML form is that string
// (text marshalling): it marshals back to humantime ("1h30m"). A job spec
// may also write the {secs, nanos} object form (see package jobspec).
type Duration time.Duration

// ErrBadDuration is wrapped by every duration parse error.
var ErrBadDuration = errors.New("invalid duration")

// durationUnits maps a humantime unit to the unit time.ParseDuration reads
// and the factor between them: d and w, which it does not know, are hours.
var durationUnits = map[string]struct {
	unit   string
	factor int64
}{
	"ns": {"ns", 1}, "us": {"us", 1}, "µs": {"µs", 1}, "ms": {"ms", 1},
	"s": {"s", 1}, "m": {"m", 1}, "h": {"h", 1}, "d": {"h", 24}, "w": {"h", 7 * 24},
}

const unitsHint = "use ns, us, ms, s, m, h, d or w, e.g. \"30s\""

// ParseDuration parses a humantime duration. Spaces may separate the pairs
// and a number from its unit ("1h 30m", "5 s"); negative durations are
// rejected. Each pair is rounded to the nearest nanosecond, so that
// ParseDuration(d.String()) == d for every non-negative d. time.ParseDuration
// does the arithmetic; this function reads the pairs, to accept d and w and
// to say what is wrong with a bad one.
func ParseDuration(s string) (Duration, error) {
	orig := s
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, fmt.Errorf("%w: empty string", ErrBadDuration)
	case s == "0":
		return 0, nil
	case s[0] == '-':
		return 0, fmt.Errorf("%w %q: must not be negative", ErrBadDuration, orig)
	}
	var total time.Duration
	for s != "" {
		i := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
		if i < 0 {
			i = len(s)
		}
		num := s[:i]
		if i == 0 {
			return 0, fmt.Errorf("%w %q: expected a number at %q", ErrBadDuration, orig, s)
		}
		if strings.Count(num, ".") > 1 || num == "." {
			return 0, fmt.Errorf("%w %q: bad number %q", ErrBadDuration, orig, num)
		}
		s = strings.TrimLeft(s[i:], " ")
		j := strings.IndexFunc(s, func(r rune) bool { return r == ' ' || r == '.' || r >= '0' && r <= '9' })
		if j < 0 {
			j = len(s)
		}
		unit, ok := durationUnits[s[:j]]
		switch {
		case j == 0:
			return 0, fmt.Errorf("%w %q: missing unit after %q (%s)", ErrBadDuration, orig, num, unitsHint)
		case !ok:
			return 0, fmt.Errorf("%w %q: unknown unit %q (%s)", ErrBadDuration, orig, s[:j], unitsHint)
		}
		s = strings.TrimLeft(s[j:], " ")
		d, ok := pairDuration(scaleDecimal(num, unit.factor), unit.unit)
		if !ok || total > math.MaxInt64-d {
			return 0, fmt.Errorf("%w %q: too large (max %s)", ErrBadDuration, orig, Duration(math.MaxInt64))
		}
		total += d
	}
	return Duration(total), nil
}

// pairDuration is num units, rounded to the nearest nanosecond, and false
// when it overflows. time.ParseDuration truncates below the nanosecond, so
// a number with a fraction is given to it ten times larger, and what it
// returns rounded: round(x) = (trunc(10x) + 5) / 10 for x >= 0.
func pairDuration(num, unit string) (time.Duration, bool) {
	if whole, frac, ok := strings.Cut(num, "."); ok {
		tenfold := whole + frac
		if len(frac) > 1 {
			tenfold = whole + frac[:1] + "." + frac[1:]
		} else if frac == "" {
			tenfold += "0"
		}
		if d, err := time.ParseDuration(tenfold + unit); err == nil {
			return d/10 + (d%10+5)/10, true
		}
		// More than 29 years: below the nanosecond is noise anyway.
	}
	d, err := time.ParseDuration(num + unit)
	return d, err == nil
}

// scaleDecimal multiplies a decimal number ("1.5") by factor, exactly.
func scaleDecimal(num string, factor int64) string {
	if factor == 1 {
		return num
	}
	whole, frac, _ := strings.Cut(num, ".")
	n, _ := new(big.Int).SetString(whole+frac, 10)
	digits := n.Mul(n, big.NewInt(factor)).String()
	if frac == "" {
		return digits
	}
	if pad := len(frac) + 1 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return digits[:len(digits)-len(frac)] + "." + digits[len(digits)-len(frac):]
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
