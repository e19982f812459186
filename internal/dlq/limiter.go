package dlq

import (
	"context"
	"fmt"
	"github.com/jetfleet/jetfleet/internal/clock"
	"math"
	"sync"
	"time"
)

// Limiter paces a replay: Wait blocks until the next item may go, or ctx
// ends (then it returns ctx's error and the item does not go).
type Limiter interface {
	Wait(ctx context.Context) error
}

// MaxRate bounds a replay's items per second; above it pacing is pointless
// (one item every microsecond).
const MaxRate = 1e6

// TokenBucket lets rate items through per second, with bursts of up to
// burst items after an idle period. Safe for concurrent use.
type TokenBucket struct {
	clk      clock.Clock
	interval time.Duration
	burst    int

	mu   sync.Mutex
	next time.Time // when the next token is due (GCRA's theoretical arrival time)
}

// NewTokenBucket returns a bucket of rate items/s (0 < rate <= MaxRate) and
// burst >= 1 on clk (nil = the system clock).
func NewTokenBucket(rate float64, burst int, clk clock.Clock) (*TokenBucket, error) {
	if !(rate > 0) || rate > MaxRate || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("dlq: rate %v, want 0 < rate <= %v", rate, MaxRate)
	}
	if burst < 1 {
		return nil, fmt.Errorf("dlq: burst %d, want >= 1", burst)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &TokenBucket{clk: clk, interval: time.Duration(float64(time.Second) / rate), burst: burst}, nil
}

// Interval is the time between two items at the bucket's rate.
func (b *TokenBucket) Interval() time.Duration { return b.interval }

// Wait reserves the next slot and waits for it. A cancelled wait gives its
// slot back only if no later slot was reserved meanwhile.
func (b *TokenBucket) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	now := b.clk.Now()
	// Idle time earns at most burst tokens.
	if earliest := now.Add(-time.Duration(b.burst-1) * b.interval); b.next.Before(earliest) {
		b.next = earliest
	}
	at := b.next
	b.next = b.next.Add(b.interval)
	b.mu.Unlock()
	d := at.Sub(now)
	if d <= 0 {
		return nil
	}
	select {
	case <-b.clk.After(d):
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		if b.next.Equal(at.Add(b.interval)) {
			b.next = at
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// LimiterFor returns the limiter of a replay at rate items/s: nil (unpaced)
// for rate 0.
func LimiterFor(rate float64, clk clock.Clock) (Limiter, error) {
	if rate == 0 {
		return nil, nil
	}
	b, err := NewTokenBucket(rate, 1, clk)
	if err != nil {
		return nil, err
	}
	return b, nil
}
