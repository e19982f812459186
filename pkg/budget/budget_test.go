package budget_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/pkg/budget"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCreateKeepsTheFirstBudgetAndDeniesAsAnError(t *testing.T) {
	js := fleettest.RunServer(t).JS()
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, budget.BucketConfig("b", 1))
	require.NoError(t, err)
	b, err := budget.New(kv)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })

	rec, created, err := b.Create(ctx, "job", 1, 0)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 1, rec.PerItemMax, "no per-item cap: the total")

	rec, created, err = b.Create(ctx, "job", 50, 5)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 1, rec.Total, "a second Create keeps the first budget")

	g, err := b.Claim(ctx, "job", 0)
	require.NoError(t, err)
	require.True(t, g.Granted)
	g, err = b.Claim(ctx, "job", 0)
	require.NoError(t, err)
	require.False(t, g.Granted)
	require.ErrorIs(t, g.Deny, budget.ErrExhausted)

	_, err = b.Get(ctx, "other")
	require.ErrorIs(t, err, budget.ErrNotFound)
	_, _, err = b.Create(ctx, "not a token", 1, 1)
	require.ErrorIs(t, err, budget.ErrInvalidJob)

	require.NoError(t, b.Close())
	_, err = b.Claim(ctx, "job", 0)
	require.True(t, errors.Is(err, budget.ErrClosed), "got %v", err)
}
