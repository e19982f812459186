package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
)

// A whole fleet in one process: an embedded JetStream server, a
// coordinator, an agent with a Go handler, and a job submitted through the
// API and followed to the end.
func Example() {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	coord, err := coordinator.New(nc, coordinator.Config{})
	if err != nil {
		panic(err)
	}
	go func() { _ = coord.Run(ctx) }()
	<-coord.Ready()

	a := agent.New(nc, agent.Config{Concurrency: 4}).
		Handle("shout", func(_ context.Context, c *agent.Call) (any, error) {
			var item struct{ Word string }
			if err := c.Decode(&item); err != nil {
				return nil, err
			}
			return strings.ToUpper(item.Word), nil
		})
	go func() { _ = a.Run(ctx) }()

	client, _ := coordinator.NewClient(nc, "")
	reply, err := client.Submit(ctx, []byte(`{
		"id": "example",
		"items": [{"id": "a", "word": "jet"}, {"id": "b", "word": "fleet"}, {"id": "c", "word": "go"}],
		"agent_template": [{"handler": "shout"}]
	}`))
	if err != nil {
		panic(err)
	}
	st, err := client.Wait(ctx, reply.JobID, 20*time.Millisecond, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s, %d of %d items succeeded\n", st.ID, st.State, st.Succeeded, st.Items)
	// Output:
	// example: succeeded, 3 of 3 items succeeded
}
