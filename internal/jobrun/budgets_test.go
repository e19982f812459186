package jobrun

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An open job accepted by an earlier version has one budget key, <job>;
// resuming it gives each of its pools a key with its share (pool a 3
// items, b 1: 8 and 2 of 10) and carries over what was spent (7, all
// within a's share). A job that has its shares is left alone.
func TestMigrateBudgetMovesALegacyKey(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := srv.JS().CreateOrUpdateKeyValue(ctx, budget.BucketConfig(messages.MustNames("").BudgetBucket(), 1))
	require.NoError(t, err)
	b, err := budget.New(kv)
	require.NoError(t, err)
	defer b.Close()
	c := &Coordinator{budget: b}
	_, _, err = b.Create(ctx, "old", budget.Record{Total: 10, PerItemMax: 10, Consumed: 7})
	require.NoError(t, err)

	rec := wire.JobRecord{
		Spec: &messages.JobSpec{Pool: "a", GroupBy: "${item.g}"},
		Status: messages.JobStatus{ID: "old", Pool: "a", State: messages.StateRunning, Items: 4,
			Budget: messages.BudgetStatus{Total: 10, PerItemMax: 10, Consumed: 3},
			Groups: map[string]messages.GroupStatus{"b": {Items: 1}, "x": {Items: 3}}},
		Routes: map[string]string{"b": "b"},
	}
	shares, err := c.migrateBudget(ctx, &rec)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 8, "b": 2}, shares)
	for pool, want := range map[string][2]int{"a": {8, 7}, "b": {2, 0}} {
		got, err := b.Get(ctx, budget.Key(pool, "old"))
		require.NoError(t, err)
		require.Equal(t, want, [2]int{got.Total, got.Consumed}, pool)
	}

	rec.BudgetShares = shares
	shares, err = c.migrateBudget(ctx, &rec)
	require.NoError(t, err)
	require.Nil(t, shares)
}
