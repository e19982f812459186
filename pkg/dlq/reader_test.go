package dlq_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/pkg/dlq"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, fleettest.IgnoreServerGoroutines()) }

func TestReaderRefusesWhatItCannotRead(t *testing.T) {
	_, err := dlq.NewReader(nil, "no spaces")
	require.Error(t, err)

	f := fleettest.RunFleet(t, nil)
	r, err := dlq.NewReader(f.Server.JS(), f.Prefix)
	require.NoError(t, err)
	ctx := context.Background()

	_, err = r.Get(ctx, 1)
	require.ErrorIs(t, err, dlq.ErrEntryNotFound)
	_, err = r.List(ctx, dlq.Filter{Limit: -1})
	require.ErrorIs(t, err, dlq.ErrBadFilter)
	page, err := r.List(ctx, dlq.Filter{})
	require.NoError(t, err)
	require.Empty(t, page.Entries)
}
