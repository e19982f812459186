package fleettest_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

type word struct {
	ID   string `json:"id"`
	Word string `json:"word"`
}

// A handler tested in a whole fleet, in one line: RunFleet starts a
// server, a coordinator and an agent, and Run submits a job and waits for
// its end.
func ExampleRunFleet() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()

	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{
		"shout": agent.Typed(func(_ context.Context, _ *agent.Call, it word) (any, error) {
			return strings.ToUpper(it.Word), nil
		}),
	}, fleettest.WithAgents(2))

	items, _ := client.ItemsOf(word{"a", "jet"}, word{"b", "fleet"})
	st := f.Run(t, &messages.JobSpec{Items: items, AgentTemplate: []messages.Step{{Handler: "shout"}}}, time.Minute)
	fmt.Printf("%s: %d of %d items succeeded\n", st.State, st.Succeeded, st.Items)
	// Output: succeeded: 2 of 2 items succeeded
}
