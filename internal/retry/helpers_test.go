package retry

import (
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func ptr[T any](v T) *T { return &v }

func dur(s string) *messages.Duration { return ptr(messages.MustDuration(s)) }

func secs(ss ...float64) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s * float64(time.Second))
	}
	return out
}

// fixedRand returns the same value every time.
func fixedRand(u float64) Rand { return RandFunc(func() float64 { return u }) }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
