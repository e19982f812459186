package messages

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseDuration: parsing never panics, results are non-negative, and
// ParseDuration(d.String()) == d, through JSON too.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"500ms", "30s", "2m30s", "1h30m", "1d", "1w", "1.5s", ".5s", "0", "0s", "1h 30m", "1µs", "100ns",
		"1d2h3m4s5ms6us7ns", "106751d23h47m16s854ms775us807ns", "5 seconds", "-1s", "1.2.3s", "1h30", "", "9999999999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrBadDuration) {
				t.Fatalf("error %v does not wrap ErrBadDuration", err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %d < 0", s, int64(d))
		}
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %d; ParseDuration(%q) = %d, %v", s, int64(d), d.String(), int64(back), err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var d2 Duration
		if err := json.Unmarshal(b, &d2); err != nil || d2 != d {
			t.Fatalf("JSON round trip of %d via %s = %d, %v", int64(d), b, int64(d2), err)
		}
	})
}
