package budget

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Key is the bucket key of pool's budget for job: <pool>.<job>. The agents
// of a pool may write only their pool's keys (the agent role's permissions,
// docs/security.md), so the server refuses one pool's spending of another's
// retries. A Budget also accepts a bare job id as a key, for a bucket that
// only trusted processes write.
func Key(pool, job string) string { return pool + "." + job }

// SplitKey returns the pool and the job of a key; pool is "" for a bare
// job id.
func SplitKey(key string) (pool, job string) {
	if p, j, ok := strings.Cut(key, "."); ok {
		return p, j
	}
	return "", key
}

func validKey(key string) error {
	pool, job := SplitKey(key)
	if err := messages.ValidToken(job); err != nil {
		return fmt.Errorf("%w %q: %v", ErrInvalidJob, key, err)
	}
	if strings.Contains(key, ".") {
		if err := messages.ValidPool(pool); err != nil {
			return fmt.Errorf("%w %q: pool: %v", ErrInvalidJob, key, err)
		}
	}
	return nil
}

// Shares divides a job budget of total retries among the pools its items
// run in, in proportion to their items (largest remainder; ties to the
// pool named first), so that the shares add up to total. Each pool's
// agents spend only their pool's share: a pool cannot use up the retries
// of another. A pool with no items gets 0.
func Shares(total int, items map[string]int64) map[string]int {
	pools := make([]string, 0, len(items))
	var all int64
	for p, n := range items {
		pools = append(pools, p)
		all += max(n, 0)
	}
	slices.Sort(pools)
	out := make(map[string]int, len(pools))
	if all == 0 || total <= 0 {
		for _, p := range pools {
			out[p] = 0
		}
		return out
	}
	type rest struct {
		pool string
		frac int64 // remainder of total*items/all, in units of 1/all
	}
	rests := make([]rest, 0, len(pools))
	given := 0
	for _, p := range pools {
		n := max(items[p], 0)
		// total and n are bounded by the job's limits; the product fits.
		q, r := int64(total)*n/all, int64(total)*n%all
		out[p] = int(q)
		given += int(q)
		rests = append(rests, rest{p, r})
	}
	slices.SortStableFunc(rests, func(a, b rest) int { return cmp.Compare(b.frac, a.frac) })
	for i := 0; given < total && i < len(rests); i++ {
		out[rests[i].pool]++
		given++
	}
	return out
}
