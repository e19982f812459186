package jobrun

import (
	"sync"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Priorities (docs/jobs.md "Priorities"). Agents take a pool's work
// messages in the order they were published, and each job keeps at most
// its queue share of them in the work stream (Config.JobQueue, queue in
// publisher.go). With every job's share full, a job's part of the pool's
// throughput is its share over the sum of the shares: the share is the
// job's weight. A job's share is JobQueue halved for each step its
// priority is below the highest priority publishing in its pools, down to
// JobQueue/32 (at least 1) five steps below and further: a job of higher
// priority is served first, and the others keep a minimum share, so
// they never starve. A job that is not publishing (all its items are
// published, it is paused, or it waits for not_before) takes no part.

// minShareShift bounds the halvings of a job's share: JobQueue/32 at least.
const minShareShift = 5

// share is the queue share of a job of priority p when the highest
// priority publishing in its pools is top.
func share(limit int64, p, top int) int64 {
	steps := min(max(top-p, 0), minShareShift)
	return max(limit>>steps, 1)
}

// priorities counts the jobs publishing in each pool by priority. Safe
// for concurrent use.
type priorities struct {
	mu     sync.Mutex
	active map[string]*[messages.MaxPriority + 1]int // pool → jobs per priority
}

// add counts a job of priority p publishing in pools until the returned
// remove is called.
func (ps *priorities) add(pools []string, p int) (remove func()) {
	p = min(max(p, messages.MinPriority), messages.MaxPriority)
	ps.mu.Lock()
	if ps.active == nil {
		ps.active = map[string]*[messages.MaxPriority + 1]int{}
	}
	for _, pool := range pools {
		n := ps.active[pool]
		if n == nil {
			n = new([messages.MaxPriority + 1]int)
			ps.active[pool] = n
		}
		n[p]++
	}
	ps.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			for _, pool := range pools {
				n := ps.active[pool]
				n[p]--
				if *n == ([messages.MaxPriority + 1]int{}) {
					delete(ps.active, pool)
				}
			}
		})
	}
}

// top is the highest priority publishing in any of pools; MinPriority
// when none is.
func (ps *priorities) top(pools []string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	top := messages.MinPriority
	for _, pool := range pools {
		n := ps.active[pool]
		if n == nil {
			continue
		}
		for p := messages.MaxPriority; p > top; p-- {
			if n[p] > 0 {
				top = p
				break
			}
		}
	}
	return top
}
