package client_test

import (
	"context"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A submitter needs a NATS connection and a coordinator somewhere on it;
// here both run in the example, with no agent, so the job waits.
func ExampleClient_JobSubmitSpec() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	nc := fleettest.RunServer(t).Conn()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord, _ := coordinator.New(nc, coordinator.Config{})
	go func() { _ = coord.Run(ctx) }()
	<-coord.Ready()

	c, err := client.New(nc, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	items, _ := client.ItemsOf(map[string]string{"id": "a"}, map[string]string{"id": "b"})
	r, err := c.JobSubmitSpec(ctx, &messages.JobSpec{ID: "nightly", Items: items,
		AgentTemplate: []messages.Step{{Shell: "echo ${item.id}"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("submitted", r.JobID)

	// Submitting the same id again is the same job.
	r, _ = c.JobSubmitSpec(ctx, &messages.JobSpec{ID: "nightly", Items: items,
		AgentTemplate: []messages.Step{{Shell: "echo ${item.id}"}}})
	fmt.Println("again:", r.JobID, "existing", r.Existing)

	st, err := c.JobCancel(ctx, "nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ = c.JobWait(ctx, st.ID, 0, nil)
	fmt.Println(st.ID, st.State, st.Items, "items")

	_, err = c.JobStatus(ctx, "no-such-job")
	fmt.Println(err)
	// Output:
	// submitted nightly
	// again: nightly existing true
	// nightly cancelled 2 items
	// not_found: job_id: no job "no-such-job"
}
