package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Which pools a job may name, and how many jobs may be open at once
// (docs/security.md, "Limits"). Each pool is a durable consumer on the
// work stream, and each open job a runner: both are bounded, so that no
// submitter can make the server or the coordinator hold an unbounded
// number of them.

// poolSet knows the work stream's pools. Safe for concurrent use.
type poolSet struct {
	c *Coordinator

	mu sync.Mutex
	// known holds the pools seen on the server or ensured, with when.
	known map[string]time.Time
}

// poolsFresh is how long a pool's consumer, once ensured, is taken to be
// there: accepting a job does not update it every time.
const poolsFresh = time.Minute

// check refuses a pool the job may not use: one outside Config.Pools when
// MaxPools is negative, or a new one when the work stream already has
// MaxPools pools. A nil problem means the pool may be used.
func (p *poolSet) check(ctx context.Context, pool string) (*messages.FieldError, error) {
	cfg := p.c.cfg
	if slices.Contains(cfg.Pools, pool) {
		return nil, nil
	}
	if cfg.MaxPools < 0 {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q is not one of the configured pools (%s); the coordinator accepts no other (--max-pools -1)", pool, strings.Join(cfg.Pools, ", "))}, nil
	}
	p.mu.Lock()
	_, ok := p.known[pool]
	p.mu.Unlock()
	if ok {
		return nil, nil
	}
	pools, err := p.list(ctx)
	if err != nil {
		return nil, err
	}
	if slices.Contains(pools, pool) {
		return nil, nil
	}
	if len(pools) >= cfg.MaxPools {
		shown := pools
		if len(shown) > 10 {
			shown = shown[:10]
		}
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q would be a new pool; the work stream has %d already (%s…), the limit is %d (--max-pools): use an existing pool",
			pool, len(pools), strings.Join(shown, ", "), cfg.MaxPools)}, nil
	}
	return nil, nil
}

// list reads the work stream's pools from its consumers' names.
func (p *poolSet) list(ctx context.Context) ([]string, error) {
	s, err := p.c.stream(ctx, p.c.names.WorkStream())
	if err != nil {
		return nil, err
	}
	prefix := p.c.names.AgentsConsumer("")
	lister := s.ConsumerNames(ctx)
	var pools []string
	for name := range lister.Name() {
		if pool, ok := strings.CutPrefix(name, prefix); ok {
			pools = append(pools, pool)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing the work stream's pools: %w", err)
	}
	sort.Strings(pools)
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string]time.Time{}
	}
	for _, pool := range pools {
		if _, ok := p.known[pool]; !ok {
			p.known[pool] = time.Time{} // seen, not ensured
		}
	}
	p.mu.Unlock()
	return pools, nil
}

// ensure creates or updates pool's work consumer, unless this coordinator
// did within poolsFresh.
func (p *poolSet) ensure(ctx context.Context, pool string) error {
	p.mu.Lock()
	at, ok := p.known[pool]
	p.mu.Unlock()
	if ok && time.Since(at) < poolsFresh {
		return nil
	}
	if _, err := provision.EnsurePool(ctx, p.c.js, p.c.names, pool, p.c.cfg.Provision.config()); err != nil {
		return err
	}
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string]time.Time{}
	}
	p.known[pool] = time.Now()
	p.mu.Unlock()
	return nil
}

// openJobs is the number of jobs pending or running, as the index knows.
func (c *Coordinator) openJobs() int { return c.index.unfinishedCount() }

// openJobsFull says why no job may be accepted now ("" if one may).
func (c *Coordinator) openJobsFull() string {
	if n := c.openJobs(); n >= c.cfg.MaxOpenJobs {
		return fmt.Sprintf("%d jobs are open (pending or running); the limit is %d (--max-open-jobs): submit again when some have finished", n, c.cfg.MaxOpenJobs)
	}
	return ""
}

// openSlotPoll is how often a durable submission waiting for the number
// of open jobs to drop under the limit looks again.
var openSlotPoll = time.Second

// waitOpenSlot holds the intake while MaxOpenJobs jobs are open: durable
// submissions wait in the jobs stream, in order, and are accepted as jobs
// finish. It logs once per wait.
func (c *Coordinator) waitOpenSlot(ctx context.Context) error {
	logged := false
	for {
		why := c.openJobsFull()
		if why == "" {
			if logged {
				c.log.Info().Msg("open jobs under the limit again; durable submissions are accepted")
			}
			return nil
		}
		if !logged {
			c.log.Warn().Str("reason", why).Msg("open jobs at the limit; durable submissions wait in the jobs stream")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(openSlotPoll):
		}
	}
}
