package itemrun

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/coordinator"
)

// runCoordinator runs a coordinator on nc until the test ends, and returns
// once it is ready.
func runCoordinator(t *testing.T, ctx context.Context, nc *nats.Conn, cfg coordinator.Config) {
	t.Helper()
	co, err := coordinator.New(nc, cfg)
	require.NoError(t, err)
	coCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- co.Run(coCtx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	select {
	case <-co.Ready():
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("coordinator exited: %v", err)
	case <-ctx.Done():
		t.Fatal("coordinator not ready")
	}
}

// runAgent runs a until stop is called, or the test ends; stop waits for
// Run to return and checks that it returned no error.
func runAgent(t *testing.T, ctx context.Context, a *Agent) (stop func()) {
	t.Helper()
	agCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(agCtx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
	t.Cleanup(stop)
	return stop
}
