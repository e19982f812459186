package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// image is an item; resizeArgs are the step's with: arguments.
type image struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

type resizeArgs struct {
	Width int `json:"width"`
}

// A handler with typed with: arguments. A with: value of the wrong type,
// or one the type does not declare, fails the step for good with the
// field's path: the item is dead-lettered at once, not retried.
func ExampleTypedWith() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{
		"resize": agent.TypedWith(func(_ context.Context, _ *agent.Call, it image, with resizeArgs) (any, error) {
			fmt.Printf("resize %s to %dpx\n", it.Path, with.Width)
			return nil, nil
		}),
	})
	items, _ := client.ItemsOf(image{"a", "a.jpg"})
	for _, with := range []map[string]any{{"width": 200}, {"width": "wide"}, {"widht": 200}} {
		st := f.Run(t, &messages.JobSpec{Items: items,
			AgentTemplate: []messages.Step{{Handler: "resize", With: with}}}, time.Minute)
		if st.DeadLettered > 0 {
			dl, _ := f.Client.DLQList(context.Background(), messages.DLQFilter{JobID: st.ID})
			attempts := dl.Entries[0].Entry.Attempts
			fmt.Println("dead-lettered:", attempts[len(attempts)-1].Message)
		}
	}
	// Output:
	// resize a.jpg to 200px
	// dead-lettered: with.width: want int, got string
	// dead-lettered: with.widht: unknown field
}

// Middleware around every handler of an agent: here it records each call
// and its outcome. A handler's panic reaches the middleware as an error
// (agent.ErrPanic) and fails the step; the agent goes on.
func ExampleAgent_Use() {
	t := fleettest.NewExampleTB()
	defer t.Close()
	var mu sync.Mutex
	var calls []string
	record := func(next agent.HandlerFunc) agent.HandlerFunc {
		return func(ctx context.Context, c *agent.Call) (any, error) {
			out, err := next(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, fmt.Sprintf("%s %s: out=%v err=%v panic=%v", c.StepName, c.ItemID, out, err, errors.Is(err, agent.ErrPanic)))
			return out, err
		}
	}
	shout := func(_ context.Context, _ *agent.Call, it struct{ Word string }) (any, error) {
		if it.Word == "" {
			panic("no word")
		}
		return strings.ToUpper(it.Word), nil
	}
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{"shout": agent.Typed(shout)},
		fleettest.WithAgentSetup(func(a *agent.Agent) { a.Use(record) }))

	one := 1
	once := &messages.RetryConfig{Attempts: &one}
	items, _ := client.ItemsOf(map[string]string{"id": "a", "word": "jet"}, map[string]string{"id": "b"})
	st := f.Run(t, &messages.JobSpec{Items: items,
		AgentTemplate: []messages.Step{{Name: "shout", Handler: "shout", RetryConfig: once}}}, time.Minute)
	slices.Sort(calls)
	for _, c := range calls {
		fmt.Println(c)
	}
	fmt.Printf("%s: %d succeeded, %d dead-lettered\n", st.State, st.Succeeded, st.DeadLettered)
	// Output:
	// shout a: out=JET err=<nil> panic=false
	// shout b: out=<nil> err=handler panicked: no word panic=true
	// failed: 1 succeeded, 1 dead-lettered
}
