package messages

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		str  string // String() of the result
	}{
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"30s", 30 * time.Second, "30s"},
		{"2m30s", 150 * time.Second, "2m30s"},
		{"1h30m", 90 * time.Minute, "1h30m"},
		{"1d", 24 * time.Hour, "1d"},
		{"1w", 7 * 24 * time.Hour, "7d"},
		{"1.5s", 1500 * time.Millisecond, "1s500ms"},
		{".5s", 500 * time.Millisecond, "500ms"},
		{"1.5h", 90 * time.Minute, "1h30m"},
		{"0.1ns", 0, "0s"},
		{"1.5ns", 2 * time.Nanosecond, "2ns"},
		{"1h 30m", 90 * time.Minute, "1h30m"},
		{" 5 s ", 5 * time.Second, "5s"},
		{"0", 0, "0s"},
		{"0s", 0, "0s"},
		{"100ns", 100, "100ns"},
		{"1us", time.Microsecond, "1us"},
		{"1µs", time.Microsecond, "1us"},
		{"1d2h3m4s5ms6us7ns", 26*time.Hour + 3*time.Minute + 4*time.Second + 5*time.Millisecond + 6*time.Microsecond + 7, "1d2h3m4s5ms6us7ns"},
		{"90s", 90 * time.Second, "1m30s"},
		{"106751d23h47m16s854ms775us807ns", math.MaxInt64, "106751d23h47m16s854ms775us807ns"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDuration(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.D() != tt.want {
				t.Errorf("ParseDuration(%q) = %d, want %d", tt.in, d, tt.want)
			}
			if d.String() != tt.str {
				t.Errorf("String() = %q, want %q", d.String(), tt.str)
			}
			if back, err := ParseDuration(d.String()); err != nil || back != d {
				t.Errorf("ParseDuration(String()) = %v, %v; want %v", back, err, d)
			}
			b, _ := json.Marshal(d)
			if string(b) != `"`+tt.str+`"` {
				t.Errorf("MarshalJSON = %s", b)
			}
		})
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `invalid duration: empty string`},
		{"5", `invalid duration "5": missing unit after "5" (use ns, us, ms, s, m, h, d or w, e.g. "30s")`},
		{"5 seconds", `invalid duration "5 seconds": unknown unit "seconds"`},
		{"2 minutes", `invalid duration "2 minutes": unknown unit "minutes"`},
		{"5mins", `invalid duration "5mins": unknown unit "mins"`},
		{"1x", `invalid duration "1x": unknown unit "x"`},
		{"-1s", `invalid duration "-1s": must not be negative`},
		{"abc", `invalid duration "abc": expected a number at "abc"`},
		{"1.2.3s", `invalid duration "1.2.3s": bad number "1.2.3"`},
		{".s", `invalid duration ".s": bad number "."`},
		{"1h30", `invalid duration "1h30": missing unit after "30"`},
		{"106751d23h47m16s854ms775us808ns", `invalid duration "106751d23h47m16s854ms775us808ns": too large`},
		{"99999999999999999999s", `invalid duration "99999999999999999999s": too large`},
		{"300000w", `invalid duration "300000w": too large`},
	}
	for _, tt := range tests {
		_, err := ParseDuration(tt.in)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseDuration(%q) error = %v, want prefix %q", tt.in, err, tt.want)
		}
		if !errors.Is(err, ErrBadDuration) {
			t.Errorf("ParseDuration(%q): error does not wrap ErrBadDuration", tt.in)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    Duration
		wantErr string
	}{
		{`"1h30m"`, MustDuration("90m"), ""},
		{`{"secs":3,"nanos":0}`, MustDuration("3s"), ""},
		{`{"secs":1,"nanos":500000000}`, MustDuration("1500ms"), ""},
		{`{"nanos":5}`, 5, ""},
		{`0`, 0, ""},
		{`{}`, 0, "{secs, nanos} form needs secs"},
		{`{"secs":-1}`, 0, "secs must be >= 0"},
		{`{"secs":1.5}`, 0, "expected an integer, got number 1.5"},
		{`{"secs":1,"ms":2}`, 0, `unknown field "ms"`},
		{`30`, 0, `bare number 30: write a string with a unit, e.g. "30s"`},
		{`true`, 0, `want a string such as "30s" or {secs, nanos}, got boolean true`},
		{`"5 seconds"`, 0, `unknown unit "seconds"`},
	}
	for _, tt := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrBadDuration) {
				t.Errorf("Unmarshal(%s) error = %v, want %q wrapping ErrBadDuration", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || d != tt.want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
	}
	// null leaves the value alone, like encoding/json.
	d := MustDuration("1s")
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d != MustDuration("1s") {
		t.Errorf("Unmarshal(null) = %v, %v", d, err)
	}
}
