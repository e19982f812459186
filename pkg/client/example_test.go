package client_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

type word struct {
	ID   string `json:"id"`
	Word string `json:"word"`
}

// A submitter needs a NATS connection and a fleet somewhere on it; here
// RunFleet starts one (a server, a coordinator, an agent) in the example.
func ExampleClient_JobSubmitSpec() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{
		"shout": agent.Typed(func(_ context.Context, _ *agent.Call, it word) (any, error) {
			return strings.ToUpper(it.Word), nil
		}),
	})
	ctx := context.Background()

	c, err := client.New(f.Server.Conn(), f.Prefix)
	if err != nil {
		fmt.Println(err)
		return
	}
	items, _ := client.ItemsOf(word{"a", "jet"}, word{"b", "fleet"})
	spec := &messages.JobSpec{ID: "nightly", Items: items, AgentTemplate: []messages.Step{{Handler: "shout"}}}
	r, err := c.JobSubmitSpec(ctx, spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := c.JobWait(ctx, r.JobID, 0, nil) // returns on the job's completed event
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.ID, st.State, st.Succeeded, "of", st.Items)

	// Submitting the same id again is the same job.
	r, _ = c.JobSubmitSpec(ctx, spec)
	fmt.Println("again:", r.JobID, "existing", r.Existing)

	_, err = c.JobStatus(ctx, "no-such-job")
	fmt.Println(err)
	// Output:
	// nightly succeeded 2 of 2
	// again: nightly existing true
	// not_found: job_id: no job "no-such-job"
}
