package retry

import (
	"math"
	"testing"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FuzzDelay: whatever the parameters and attempt number, a delay is in
// [0, max_delay]. Run with: go test -fuzz FuzzDelay ./internal/retry/
func FuzzDelay(f *testing.F) {
	f.Add(uint8(0), uint8(0), int64(time.Second), int64(30*time.Second), 2.0, int64(time.Second), 10_000, 0.3, 0.5, int64(0))
	f.Add(uint8(3), uint8(3), int64(1), int64(math.MaxInt64), 10.0, int64(math.MaxInt64/2), math.MaxInt32, 1.0, 0.999, int64(math.MaxInt64))
	f.Add(uint8(1), uint8(1), int64(0), int64(0), 1.0, int64(0), -5, 0.0, 0.0, int64(-1))
	kinds := []messages.BackoffKind{messages.BackoffExponential, messages.BackoffLinear, messages.BackoffFibonacci, messages.BackoffFixed, messages.BackoffCustom}
	modes := []messages.JitterMode{"", messages.JitterProportional, messages.JitterFull, messages.JitterEqual, messages.JitterDecorrelated}
	f.Fuzz(func(t *testing.T, kind, mode uint8, initial, maxDelay int64, base float64, inc int64, n int, factor, u float64, prev int64) {
		if initial < 0 || maxDelay < initial || inc < 0 || !(base >= 1) || math.IsInf(base, 0) || !(factor >= 0 && factor <= 1) {
			t.Skip()
		}
		p, err := NewPolicy(&messages.RetryConfig{
			Backoff: &messages.Backoff{Kind: kinds[int(kind)%len(kinds)], Base: base, Increment: ptr(messages.Duration(inc)),
				Delays: []messages.Duration{messages.Duration(initial), messages.Duration(maxDelay)}},
			InitialDelay: ptr(messages.Duration(initial)), MaxDelay: ptr(messages.Duration(maxDelay)),
			JitterMode: modes[int(mode)%len(modes)], JitterFactor: &factor,
		})
		if err != nil {
			t.Fatal(err)
		}
		d := p.Delay(n, time.Duration(prev), fixedRand(u))
		if d < 0 || d > time.Duration(maxDelay) {
			t.Fatalf("delay %d outside [0, %d]", d, maxDelay)
		}
	})
}

// FuzzSignature: any message hashes to 16 hex digits without panicking.
func FuzzSignature(f *testing.F) {
	for _, s := range []string{"", "open /tmp/a/1.txt: no such file", `"unterminated`, "'x", "[::1]:80", "0x", "C:\\x\\y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sig := Signature(s); len(sig) != 16 {
			t.Fatalf("signature %q", sig)
		}
	})
}
