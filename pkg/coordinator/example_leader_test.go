package coordinator_test

import (
	"context"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// Work that only one coordinator of a prefix may do at a time (a sweep, a
// cleanup) runs with OnLeader: in every leadership term of this
// coordinator, with a context that ends with the term.
func ExampleCoordinator_OnLeader() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	nc := fleettest.RunServer(t).Conn()

	coord, err := coordinator.New(nc, coordinator.Config{Holder: "coordinator-a"})
	if err != nil {
		panic(err)
	}
	leading := make(chan struct{})
	coord.OnLeader("sweep", func(ctx context.Context) error {
		close(leading) // a real component loops until ctx ends
		<-ctx.Done()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- coord.Run(ctx) }()
	<-leading
	fmt.Println("leader:", coord.Leader())
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// leader: coordinator-a
	// stopped: <nil>
}
