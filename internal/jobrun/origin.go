package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Who may report what (docs/security.md). An agent publishes results and
// dead letters only on its own pool's subjects (fleet.results.<pool>.<job>,
// fleet.dlq.<pool>.<job>); the subject's pool is the origin. The
// coordinator counts a result only from the pool its item was routed to,
// replays an entry only when its origin is that pool, and republishes it to
// that pool, never to the pool the entry's body names. Its own results (the
// DLQ mover's, reopen markers) have origin messages.CoordinatorOrigin.

// Reasons a result is refused, the label of
// jetfleet_coordinator_results_refused_total.
const (
	refusedWrongPool = "wrong_pool"
	refusedNotCoord  = "coordinator_only"
)

// itemPools knows the pool each item of a job was routed to. A job without
// routed groups runs every item on its pool; a job whose group_by routes
// groups to pools of the same name keeps one pool code per item (2 bytes
// an item), read from its input when the runner starts. Immutable once
// built.
type itemPools struct {
	def   string
	items int64    // the job's item count; 0 = not known (every index is taken for the job's)
	names []string // by code; names[0] is def
	codes []uint16 // per item index; nil = every item on def
	// known is false when the input could not be read: any of the job's
	// pools is then accepted for any item (publishing fails on the same
	// input and ends the job).
	known bool
}

// of returns the pool item idx was routed to, "" for an index outside the
// job.
func (p *itemPools) of(idx int64) string {
	if idx < 0 || (p.items > 0 && idx >= p.items) {
		return ""
	}
	if p.codes == nil {
		return p.def
	}
	if idx < 0 || idx >= int64(len(p.codes)) {
		return ""
	}
	return p.names[p.codes[idx]]
}

// allows reports whether pool may report item idx's outcome.
func (p *itemPools) allows(idx int64, pool string) bool {
	if p.known {
		return p.of(idx) == pool
	}
	for _, n := range p.names {
		if n == pool {
			return true
		}
	}
	return false
}

// mayReport reports whether a result from origin may stand for item idx's
// outcome: the coordinator's, or its pool's.
func (p *itemPools) mayReport(idx int64, origin string) bool {
	return origin == messages.CoordinatorOrigin || p.allows(idx, origin)
}

// loadPools builds the runner's itemPools (see buildItemPools).
func (r *jobRunner) loadPools(ctx context.Context) {
	defer close(r.poolsReady)
	r.pools = buildItemPools(ctx, r.c.opener, &r.rec, r.log)
}

// buildItemPools returns the pools of rec's items; it reads the job's input
// when the job routes groups to other pools.
func buildItemPools(ctx context.Context, open expand.Opener, rec *wire.JobRecord, log zerolog.Logger) *itemPools {
	spec, routes, items := rec.Spec, rec.Routes, rec.Status.Items
	p := &itemPools{def: messages.DefaultPool, items: items, known: true}
	if spec != nil && spec.Pool != "" {
		p.def = spec.Pool
	}
	p.names = []string{p.def}
	if len(routes) == 0 || spec == nil {
		return p
	}
	code := map[string]uint16{p.def: 0}
	groups := make([]string, 0, len(routes))
	for g := range routes {
		groups = append(groups, g)
	}
	slices.Sort(groups) // stable codes
	for _, g := range groups {
		pool := routes[g]
		if _, ok := code[pool]; !ok && len(p.names) < math.MaxUint16 {
			code[pool] = uint16(len(p.names))
			p.names = append(p.names, pool)
		}
	}
	codes, err := readPoolCodes(ctx, open, spec, routes, code, items)
	if err != nil {
		p.known = false
		if ctx.Err() == nil {
			log.Error().Err(err).Msg("cannot read the input to learn each item's pool; results are accepted from any of the job's pools")
		}
		return p
	}
	p.codes = codes
	return p
}

func readPoolCodes(ctx context.Context, open expand.Opener, spec *messages.JobSpec, routes map[string]string, code map[string]uint16, items int64) ([]uint16, error) {
	src, err := expand.Open(ctx, spec, open, expand.WithoutDuplicateCheck())
	if err != nil {
		return nil, err
	}
	defer src.Close()
	codes := make([]uint16, items)
	for {
		it, err := src.Next()
		if errors.Is(err, io.EOF) {
			return codes, nil
		}
		if err != nil {
			return nil, err
		}
		if it.Index < 0 || it.Index >= items {
			return nil, fmt.Errorf("input has more items than the %d counted at acceptance", items)
		}
		if pool, ok := routes[it.Group]; ok {
			codes[it.Index] = code[pool]
		}
	}
}

// itemPoolsReady returns the runner's itemPools once built, or nil if ctx
// ends first.
func (r *jobRunner) itemPoolsReady(ctx context.Context) *itemPools {
	select {
	case <-r.poolsReady:
		return r.pools
	case <-ctx.Done():
		return nil
	}
}

// admits reports whether a result from origin may count. It logs and
// counts a refusal. Called by the results consumer after loadPools.
func (r *jobRunner) admits(res *messages.Result, origin string) bool {
	if origin == messages.CoordinatorOrigin {
		return true
	}
	why := ""
	switch {
	case res.Outcome == messages.OutcomeReopened:
		why = refusedNotCoord // only a replay reopens an item
	case res.Phase == messages.PhaseReduce || res.Phase == messages.PhaseSetup:
		if origin != r.pools.def {
			why = refusedWrongPool
		}
	case !r.pools.allows(res.Index, origin):
		why = refusedWrongPool
	}
	if why == "" {
		return true
	}
	r.c.metrics.resultsRefused.WithLabelValues(why).Inc()
	r.log.Warn().Str("origin", origin).Int64("index", res.Index).Str("item_id", res.ItemID).Str("outcome", res.Outcome).
		Str("reason", why).Str("want_pool", r.pools.of(res.Index)).
		Msg("result refused: it did not come from the pool the item was routed to")
	return false
}

// routeReplay is the replayer's dlq.RouteFunc: the pool the entry's item
// is routed to by its job. An entry an agent wrote is replayed only when
// the agent's pool is that pool.
func (c *Coordinator) routeReplay(ctx context.Context, e *messages.DLQEntry, origin string) (string, error) {
	p, err := c.poolsOf(ctx, e.JobID)
	if err != nil {
		return "", err
	}
	want := p.def
	if e.Index >= 0 {
		if want = p.of(e.Index); want == "" {
			return "", fmt.Errorf("%w: item index %d is outside job %s", dlq.ErrNotReplayable, e.Index, e.JobID)
		}
	}
	ok := origin == messages.CoordinatorOrigin || origin == want || (!p.known && p.allows(e.Index, origin))
	if !ok {
		c.metrics.resultsRefused.WithLabelValues(refusedWrongPool).Inc()
		c.log.Warn().Str("job_id", e.JobID).Str("item_id", e.ItemID).Str("origin", origin).Str("want_pool", want).
			Msg("DLQ entry not replayed: it was written by a pool the item was not routed to")
		return "", fmt.Errorf("%w: entry written by pool %q, but the item is routed to pool %q", dlq.ErrNotReplayable, origin, want)
	}
	return want, nil
}

// poolsLoad is one job's itemPools being built for a replay.
type poolsLoad struct {
	done chan struct{}
	p    *itemPools
	err  error
}

// poolsOf returns the pools of job's items: its runner's, or, when the job
// has no runner (it finished), built from its record once per replay
// without reopening the job (dropped when the replay releases the job).
func (c *Coordinator) poolsOf(ctx context.Context, job string) (*itemPools, error) {
	if r := c.runner(job); r != nil {
		if p := r.itemPoolsReady(ctx); p != nil {
			return p, nil
		}
		return nil, ctx.Err()
	}
	return c.dlq.finishedPools(ctx, job, c.loadItemPools)
}

// loadItemPools builds the pools of a finished job's items from its
// record, unless a replay may not reopen it.
func (c *Coordinator) loadItemPools(ctx context.Context, job string) (*itemPools, error) {
	if err := c.replayable(ctx, job); err != nil {
		return nil, err
	}
	rec, err := c.store.get(ctx, job)
	if err != nil {
		return nil, err
	}
	return buildItemPools(ctx, c.opener, rec, c.log.With().Str("job_id", job).Logger()), nil
}

// finishedPools returns the pools of a finished job's items, built by load
// once per replay.
func (s *dlqService) finishedPools(ctx context.Context, job string, load func(context.Context, string) (*itemPools, error)) (*itemPools, error) {
	s.poolsMu.Lock()
	l, ok := s.pools[job]
	if !ok {
		l = &poolsLoad{done: make(chan struct{})}
		s.pools[job] = l
	}
	s.poolsMu.Unlock()
	if !ok {
		func() {
			defer close(l.done)
			l.p, l.err = load(ctx, job)
		}()
		if l.err != nil && !errors.Is(l.err, dlq.ErrNotReplayable) {
			s.poolsMu.Lock()
			delete(s.pools, job) // a transient failure: the next entry tries again
			s.poolsMu.Unlock()
		}
	}
	select {
	case <-l.done:
		return l.p, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// forgetPools drops what poolsOf built for jobs.
func (s *dlqService) forgetPools(jobs []string) {
	s.poolsMu.Lock()
	defer s.poolsMu.Unlock()
	for _, j := range jobs {
		delete(s.pools, j)
	}
}
