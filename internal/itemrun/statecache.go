package itemrun

import (
	"sync"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// A retried item's redelivery reads the item's state from the items
// bucket (loadState): a round trip, with the worker's slot held, for every
// retry. When the redelivery comes back to the agent that wrote the state
// before its delayed nak, the agent knows the state already. It remembers
// what it wrote by the work message's stream sequence and the delivery
// that wrote it, and the redelivery uses it only if it is the very next
// delivery of that message (NumDelivered one higher): no other delivery,
// so no other agent's write, came in between. A parked copy is a new
// message and never matches. A zombie of an older delivery that writes
// late makes this agent's next write of the state conflict, and the agent
// steps aside as it would after reading that write (docs/jetstream.md §8).

// stateCacheSize bounds the states an agent remembers: the oldest go
// first (their redeliveries went to other agents).
const stateCacheSize = 4096

// cachedState is a state the agent wrote, at revision rev of key, while
// handling the delivered-th delivery of its message.
type cachedState struct {
	key       string
	rev       uint64
	delivered uint64
	st        wire.ItemState
}

// stateCache is the states an agent wrote before a delayed nak, by stream
// sequence. It is safe for concurrent use.
type stateCache struct {
	mu   sync.Mutex
	m    map[uint64]cachedState
	ring []uint64 // insertion order, for eviction
	next int
}

func newStateCache(n int) *stateCache {
	return &stateCache{m: make(map[uint64]cachedState, n), ring: make([]uint64, n)}
}

// put remembers e for the message at stream sequence seq.
func (c *stateCache) put(seq uint64, e cachedState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[seq]; !ok {
		if old := c.ring[c.next]; old != 0 {
			delete(c.m, old)
		}
		c.ring[c.next] = seq
		c.next = (c.next + 1) % len(c.ring)
	}
	c.m[seq] = e
}

// take returns and forgets the state remembered for the message at seq if
// it is key's and was written by the delivery before delivered.
func (c *stateCache) take(seq uint64, key string, delivered uint64) (cachedState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[seq]
	if !ok {
		return cachedState{}, false
	}
	delete(c.m, seq) // its slot in the ring is reused in turn
	if e.key != key || e.delivered+1 != delivered {
		return cachedState{}, false
	}
	return e, true
}
