package jobrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A job's retry budget is kept per pool, under budget.Key(pool, job), so
// that the server lets each pool's agents spend only their own pool's
// retries (docs/security.md). A job whose groups are routed to several
// pools has a record in each, holding the pool's share of the total in
// proportion to its items (budget.Shares, kept in JobRecord.BudgetShares
// for the agents); a job of one pool has one record with the whole budget.

// poolItems counts a job's items per pool: the job's pool (which also runs
// the reduce item, and so is listed even without map items) and the pools
// its groups are routed to.
func poolItems(pool string, total int64, groups map[string]int64, routes map[string]string) map[string]int64 {
	items := map[string]int64{pool: 0}
	rest := total
	for g, n := range groups {
		if p, ok := routes[g]; ok {
			items[p] += n
			rest -= n
		}
	}
	items[pool] += max(rest, 0)
	return items
}

// createBudgets stores the job's budget records, one per pool, replacing
// whatever the keys held: a budget left by a rejected attempt (one that
// died after creating it) must not stand in for this job's. It sets
// rec.BudgetShares.
func (c *Coordinator) createBudgets(ctx context.Context, rec *wire.JobRecord, brec budget.Record, items map[string]int64) error {
	id := rec.Status.ID
	rec.BudgetShares = budget.Shares(brec.Total, items)
	for _, pool := range slices.Sorted(maps.Keys(items)) {
		key := budget.Key(pool, id)
		if err := c.budgetKV.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		if _, _, err := c.budget.Create(ctx, key, poolBudget(brec, rec.BudgetShares[pool], 0)); err != nil {
			return fmt.Errorf("budget of %s in pool %s: %w", id, pool, err)
		}
	}
	return nil
}

// poolBudget is a pool's record of a job budget rec: its share of the
// total, and consumed units already spent.
func poolBudget(rec budget.Record, share, consumed int) budget.Record {
	rec.Total, rec.PerItemMax, rec.Consumed = share, min(rec.PerItemMax, share), consumed
	return rec
}

// migrateBudget gives an open job accepted by an earlier version, whose
// budget is the single key <job> (its record has no BudgetShares), its
// per-pool keys, carrying over what was spent; it returns the shares to
// record, nil when there is nothing to do. Keys that exist are kept.
func (c *Coordinator) migrateBudget(ctx context.Context, rec *wire.JobRecord) (map[string]int, error) {
	st := &rec.Status
	if rec.BudgetShares != nil || rec.Spec == nil || messages.TerminalState(st.State) {
		return nil, nil
	}
	brec := budget.Record{Total: st.Budget.Total, PerItemMax: st.Budget.PerItemMax,
		RequestedTotal: st.Budget.RequestedTotal, RequestedPerItem: st.Budget.RequestedPerItem, ClampedBy: st.Budget.ClampedBy}
	spent := st.Budget.Consumed
	if old, err := c.budget.Get(ctx, st.ID); err == nil {
		spent = max(spent, old.Consumed)
	} else if !errors.Is(err, budget.ErrNotFound) {
		return nil, err
	}
	groups := make(map[string]int64, len(st.Groups))
	for g, gs := range st.Groups {
		groups[g] = gs.Items
	}
	pool := jobPools(rec)[0]
	shares := budget.Shares(brec.Total, poolItems(pool, st.Items, groups, rec.Routes))
	for _, p := range slices.Sorted(maps.Keys(shares)) {
		used := min(spent, shares[p])
		spent -= used
		if _, _, err := c.budget.Create(ctx, budget.Key(p, st.ID), poolBudget(brec, shares[p], used)); err != nil {
			return nil, fmt.Errorf("budget of %s in pool %s: %w", st.ID, p, err)
		}
	}
	return shares, nil
}

// forgetBudgets drops what the coordinator's Budget remembers of the job.
func (c *Coordinator) forgetBudgets(rec *wire.JobRecord) {
	for _, pool := range jobPools(rec) {
		c.budget.Forget(budget.Key(pool, rec.Status.ID))
	}
}

// fillBudget copies the job's spending (the sum of its pools' records)
// into rec's status, and its breaker state. On a read error the status
// keeps what it had.
func (c *Coordinator) fillBudget(ctx context.Context, rec *wire.JobRecord) {
	st := &rec.Status
	consumed := 0
	for _, pool := range jobPools(rec) {
		r, err := c.budget.Get(ctx, budget.Key(pool, st.ID))
		if err != nil {
			return
		}
		consumed += max(r.Consumed, 0)
	}
	// The spending is the bucket's; the limits are those the job record
	// holds since acceptance (the agents may write their pools' keys).
	b := st.Budget
	b.Consumed = consumed
	b.Exhausted = b.Consumed >= b.Total
	st.Budget = b
	c.fillBreaker(ctx, st)
}
