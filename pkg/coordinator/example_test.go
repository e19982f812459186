package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Shout is the item of the "shout" handler: a struct for the submitter and
// the handler alike.
type Shout struct {
	ID   string `json:"id"`
	Word string `json:"word"`
}

// A whole fleet in one process: an embedded JetStream server, a
// coordinator, an agent with a typed Go handler, and a job built in code,
// submitted through the API and followed to its end (the README's
// example).
func Example() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	nc := fleettest.RunServer(t).Conn()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord, _ := coordinator.New(nc, coordinator.Config{})
	go func() { _ = coord.Run(ctx) }()
	<-coord.Ready()

	a := agent.New(nc, agent.Config{Concurrency: 4})
	agent.HandleFunc(a, "shout", func(ctx context.Context, c *agent.Call, it Shout) (any, error) {
		if it.Word == "" {
			return nil, agent.Permanent(errors.New("no word"))
		}
		return strings.ToUpper(it.Word), nil
	})
	go func() { _ = a.Run(ctx) }()

	cl, _ := client.New(nc, "")
	items, _ := client.ItemsOf(Shout{"a", "jet"}, Shout{"b", "fleet"}, Shout{"c", ""})
	r, err := cl.JobSubmitSpec(ctx, &messages.JobSpec{ID: "example", Items: items,
		AgentTemplate: []messages.Step{{Handler: "shout"}}})
	if err != nil {
		panic(err)
	}
	st, err := cl.JobWait(ctx, r.JobID, 0, nil) // returns on the job's completed event
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s, %d of %d items succeeded, %d dead-lettered\n", st.ID, st.State, st.Succeeded, st.Items, st.DeadLettered)
	// Output:
	// example: failed, 2 of 3 items succeeded, 1 dead-lettered
}
