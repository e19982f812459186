package provision

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A coordinator adding pools' park streams to the work stream's sources
// beside agents creating their pools' work consumers, in one process (a
// test's fleet, the demo): under the race detector the embedded server
// reports a data race between the two (LockStream's comment) unless
// provisioning keeps them apart. Without the race detector this checks
// only that both end as asked.
func TestSourcesAddedBesideNewConsumers(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := messages.Names{}
	cfg := Config{DLQMaxBytes: 1 << 20}
	require.NoError(t, Ensure(ctx, srv.JS(), names, cfg))
	const n = 150
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	wg.Go(func() { // the coordinator
		for i := range n {
			errs <- ensureSource(ctx, srv.JS(), names.WorkStream(), parkSource(names, fmt.Sprint("c", i)))
		}
	})
	wg.Go(func() { // the agents
		for i := range n {
			_, err := WaitPool(ctx, srv.JS(), names, fmt.Sprint("a", i), cfg)
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	stream, err := srv.JS().Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	info := stream.CachedInfo()
	require.Len(t, info.Config.Sources, n, "every source added")
	require.Equal(t, n, info.State.Consumers, "every agent's consumer")
}
