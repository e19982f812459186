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

// TestDurationJSON: the JSON form of a Duration is its humantime string
// (package jobspec reads the other forms a job spec may use).
func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"1h30m"`), &d); err != nil || d != MustDuration("90m") {
		t.Errorf("Unmarshal = %v, %v", d, err)
	}
	err := json.Unmarshal([]byte(`"5 seconds"`), &d)
	if err == nil || !strings.Contains(err.Error(), `unknown unit "seconds"`) || !errors.Is(err, ErrBadDuration) {
		t.Errorf("Unmarshal error = %v", err)
	}
	// null leaves the value alone, like encoding/json.
	d = MustDuration("1s")
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d != MustDuration("1s") {
		t.Errorf("Unmarshal(null) = %v, %v", d, err)
	}
	out, err := json.Marshal(struct {
		D Duration `json:"d"`
	}{MustDuration("36h")})
	if err != nil || string(out) != `{"d":"1d12h"}` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
}
