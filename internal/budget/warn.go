package budget

import (
	"sync"
	"time"

	"github.com/jetfleet/jetfleet/internal/clock"
)

// TamperWarnInterval is how often, at most, a Budget logs that one key's
// stored record carries limits other than the job's (WithLimits): every
// claim on such a key reads the record, so an unpaced warning would be
// logged once per claim.
const TamperWarnInterval = time.Minute

// warnPacer lets a warning about a key through once per interval and
// counts the ones it holds back in between. It is safe for concurrent
// use.
type warnPacer struct {
	clock    clock.Clock
	interval time.Duration

	mu   sync.Mutex // a leaf lock
	keys map[string]*paced
}

type paced struct {
	last       time.Time // when the last warning was let through
	suppressed int       // held back since then
}

func newWarnPacer(clk clock.Clock, interval time.Duration) *warnPacer {
	return &warnPacer{clock: clk, interval: interval, keys: map[string]*paced{}}
}

// allow reports whether key's warning is to be logged now and, when it
// is, how many of its warnings were held back since the last one logged.
func (p *warnPacer) allow(key string) (suppressed int, ok bool) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys[key]
	switch {
	case k == nil:
		p.keys[key] = &paced{last: now}
		return 0, true
	case now.Sub(k.last) < p.interval:
		k.suppressed++
		return 0, false
	}
	suppressed = k.suppressed
	k.last, k.suppressed = now, 0
	return suppressed, true
}

// forget drops key's pacing (its job ended).
func (p *warnPacer) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.keys, key)
}
