package jobrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
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
	js      jetstream.JetStream
	names   messages.Names
	denials *natsconn.Denials
	streams *streamCache
	prov    provision.Config
	// configured are Config.Pools, always allowed; maxPools is
	// Config.MaxPools.
	configured []string
	maxPools   int

	mu sync.Mutex
	// known holds the pools seen on the server or ensured, with when.
	known map[string]time.Time
	// permitted remembers, per pool, whether the coordinator's permissions
	// cover the pool (permitted); bounded by maxPermitted.
	permitted map[string]bool
}

// maxPermitted bounds poolSet.permitted: past it the answers are asked
// again.
const maxPermitted = 4096

// poolsFresh is how long a pool's consumer, once ensured, is taken to be
// there: accepting a job does not update it every time.
const poolsFresh = time.Minute

// check refuses a pool the job may not use: one outside Config.Pools when
// MaxPools is negative, or a new one when the work stream already has
// MaxPools pools. A nil problem means the pool may be used.
func (p *poolSet) check(ctx context.Context, pool string) (*messages.FieldError, error) {
	if slices.Contains(p.configured, pool) {
		return nil, nil
	}
	if ok, err := p.permittedPool(ctx, pool); err != nil {
		return nil, err
	} else if !ok {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q is not provisioned: the coordinator's NATS permissions do not cover its park stream %s (fleetctl auth init --pools lists the fleet's pools)",
			pool, p.names.ParkStream(pool))}, nil
	}
	if p.maxPools < 0 {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q is not one of the configured pools (%s); the coordinator accepts no other (--max-pools -1)", pool, strings.Join(p.configured, ", "))}, nil
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
	if len(pools) >= p.maxPools {
		shown := pools
		if len(shown) > 10 {
			shown = shown[:10]
		}
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q would be a new pool; the work stream has %d already (%s…), the limit is %d (--max-pools): use an existing pool",
			pool, len(pools), strings.Join(shown, ", "), p.maxPools)}, nil
	}
	return nil, nil
}

// permittedPool reports whether the coordinator may provision pool: a
// fleet secured by fleetctl auth init grants the coordinator the park
// stream of each pool it names and no other (docs/security.md). It asks
// the server for the park stream's info once per pool; the server refuses
// an unprovisioned pool's at once (natsconn.Denials), so a submission
// naming one is refused without waiting for a timeout.
func (p *poolSet) permittedPool(ctx context.Context, pool string) (bool, error) {
	p.mu.Lock()
	ok, asked := p.permitted[pool]
	p.mu.Unlock()
	if asked {
		return ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, poolProbeTimeout)
	defer cancel()
	_, err := p.denials.Request(ctx, apiPrefix(p.js)+"STREAM.INFO."+p.names.ParkStream(pool), nil)
	switch {
	case errors.Is(err, natsconn.ErrDenied):
		ok = false
	case err != nil:
		return false, fmt.Errorf("asking for pool %s's park stream: %w", pool, err)
	default:
		ok = true // its info, or "stream not found": the coordinator may create it
	}
	p.mu.Lock()
	if p.permitted == nil || len(p.permitted) >= maxPermitted {
		p.permitted = map[string]bool{}
	}
	p.permitted[pool] = ok
	p.mu.Unlock()
	return ok, nil
}

// mayUse reports whether the coordinator's permissions name stream: the
// server refuses the stream's info at once when they do not
// (natsconn.Denials). Role keys of the previous release's `fleetctl auth
// init` name no pool dead-letter stream and no specs bucket; a fleet keeps
// them until its roll ends (docs/deploy.md, "Upgrades"). Not remembered:
// keys re-issued and reloaded grant them later. Any answer but a refusal
// (the info, "not found", a timeout) counts as permitted, and the caller's
// own request then says what it is.
func (p *poolSet) mayUse(ctx context.Context, stream string) bool {
	ctx, cancel := context.WithTimeout(ctx, poolProbeTimeout)
	defer cancel()
	return p.denials.StreamPermitted(ctx, apiPrefix(p.js), stream)
}

// poolProbeTimeout bounds permittedPool's request when the server neither
// answers nor refuses it (a server cut off its cluster).
const poolProbeTimeout = 10 * time.Second

// apiPrefix is the subject prefix of js's JetStream API requests: its
// domain's, its own prefix, or the default.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// list reads the work stream's pools from its consumers' names.
func (p *poolSet) list(ctx context.Context) ([]string, error) {
	s, err := p.streams.Stream(ctx, p.names.WorkStream())
	if err != nil {
		return nil, err
	}
	prefix := p.names.AgentsConsumer("")
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
	if _, err := provision.EnsurePoolPermitted(ctx, p.js, p.names, pool, p.prov, p.mayUse); err != nil {
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

// openJobs is the number of jobs pending or running, as the index knows,
// and the durable submissions being accepted (each may become one).
func (c *Coordinator) openJobs() int {
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	return c.index.unfinishedCount() + c.slots.accepting
}

// openSlots lets durable submissions into acceptance while fewer than
// MaxOpenJobs jobs are open or being accepted; at the limit, those that
// wait are let in in the order the intake took them. Safe for concurrent
// use.
type openSlots struct {
	mu sync.Mutex
	// accepting counts the submissions being accepted.
	accepting int
	// next is the last ticket given; waiting the tickets held at the
	// limit, in order.
	next    uint64
	waiting []uint64
	// changed is closed, and replaced, when waiting or accepting changes.
	changed chan struct{}
}

// ticket gives a submission its place in the order; the intake takes one
// per submission, in stream order, and the submission's acceptance calls
// waitOpenSlot with it.
func (o *openSlots) ticket() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	return o.next
}

// leave takes t out of the queue and wakes the waiters. o.mu is held.
func (o *openSlots) leave(t uint64) {
	if i := slices.Index(o.waiting, t); i >= 0 {
		o.waiting = slices.Delete(o.waiting, i, i+1)
	}
	o.wake()
}

// hold puts t in the queue, in order, if it is not there. o.mu is held.
func (o *openSlots) hold(t uint64) {
	i, found := slices.BinarySearch(o.waiting, t)
	if !found {
		o.waiting = slices.Insert(o.waiting, i, t)
	}
}

// drop takes t out of the queue if it is still there.
func (o *openSlots) drop(t uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.waiting, t) {
		o.leave(t)
	}
}

// wake tells the waiters that something changed. o.mu is held.
func (o *openSlots) wake() {
	if o.changed != nil {
		close(o.changed)
	}
	o.changed = make(chan struct{})
}

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

// waitOpenSlot holds the durable submission with ticket t while
// MaxOpenJobs jobs are open or being accepted, or submissions taken
// before it wait for that: at the limit, submissions wait in the jobs
// stream and are accepted in order as jobs finish. It
// logs once per wait. The returned func gives the slot back once the
// submission is a job (the index counts it then) or refused.
func (c *Coordinator) waitOpenSlot(ctx context.Context, t uint64) (release func(), err error) {
	o := &c.slots
	logged := false
	for {
		o.mu.Lock()
		n := c.index.unfinishedCount() + o.accepting
		if (len(o.waiting) == 0 || o.waiting[0] == t) && n < c.cfg.MaxOpenJobs {
			o.accepting++
			o.leave(t)
			o.mu.Unlock()
			if logged {
				c.log.Info().Msg("open jobs under the limit again; durable submissions are accepted")
			}
			return func() {
				o.mu.Lock()
				o.accepting--
				o.wake()
				o.mu.Unlock()
			}, nil
		}
		o.hold(t)
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		if !logged && n >= c.cfg.MaxOpenJobs {
			c.log.Warn().Str("reason", fmt.Sprintf("%d jobs are open (pending or running); the limit is %d (--max-open-jobs)", n, c.cfg.MaxOpenJobs)).
				Msg("open jobs at the limit; durable submissions wait in the jobs stream")
			logged = true
		}
		select {
		case <-ctx.Done():
			o.mu.Lock()
			o.leave(t)
			o.mu.Unlock()
			return nil, ctx.Err()
		case <-changed:
		case <-time.After(openSlotPoll):
		}
	}
}
