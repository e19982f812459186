package retry

import (
	"math/rand/v2"
	"sync"
)

// Rand is the source of randomness for jitter: Float64 returns a number in
// [0, 1). Tests pass deterministic sources; values outside [0, 1) are clamped.
type Rand interface {
	Float64() float64
}

// RandFunc adapts a function to [Rand], e.g. RandFunc(func() float64 { return 0.5 }).
type RandFunc func() float64

// Float64 calls f.
func (f RandFunc) Float64() float64 { return f() }

// NewRand returns a [Rand] seeded with seed: the same seed gives the same
// sequence. It is safe for concurrent use.
func NewRand(seed uint64) Rand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// globalRand uses math/rand/v2's randomly seeded, concurrency-safe source.
type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// DefaultRand is the source used when a nil [Rand] is passed: math/rand/v2's
// randomly seeded global generator. It is safe for concurrent use.
var DefaultRand Rand = globalRand{}

// unit draws from r (DefaultRand when nil) and clamps into [0, 1].
func unit(r Rand) float64 {
	if r == nil {
		r = DefaultRand
	}
	u := r.Float64()
	switch {
	case u != u || u < 0: // NaN or negative
		return 0
	case u > 1:
		return 1
	}
	return u
}
