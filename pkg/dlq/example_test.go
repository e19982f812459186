package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/dlq"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

type image struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// A fleet dead-letters two of three items; a Reader, on the JetStream
// connection alone, lists and counts them.
func ExampleReader() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{
		"resize": agent.Typed(func(_ context.Context, _ *agent.Call, it image) (any, error) {
			switch it.Path {
			case "b.jpg":
				return nil, agent.Permanent(errors.New("invalid image header"))
			case "c.jpg":
				return nil, agent.Permanent(errors.New("dial tcp 10.0.0.7:443: connect: connection refused"))
			}
			return it.Path, nil
		}),
	})
	items, _ := client.ItemsOf(image{"a", "a.jpg"}, image{"b", "b.jpg"}, image{"c", "c.jpg"})
	f.Run(t, &messages.JobSpec{ID: "thumbs", Items: items, AgentTemplate: []messages.Step{{Handler: "resize"}}}, time.Minute)

	ctx := context.Background()
	r, err := dlq.NewReader(f.Server.JS(), f.Prefix)
	if err != nil {
		fmt.Println(err)
		return
	}
	page, err := r.List(ctx, dlq.Filter{JobID: "thumbs"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var lines []string
	for _, ref := range page.Entries {
		e := ref.Entry
		lines = append(lines, fmt.Sprintf("%s: %s, %s: %s", e.ItemID, e.Reason, e.ErrorClass, e.Error))
	}
	slices.Sort(lines) // entries are in the order the items gave up
	for _, l := range lines {
		fmt.Println(l)
	}

	st, err := r.Stats(ctx, dlq.Filter{JobID: "thumbs", ErrorClass: "network"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("network errors:", st.Total)

	var out bytes.Buffer // JSON lines, one entry a line
	n, err := r.Export(ctx, dlq.Filter{JobID: "thumbs", Text: "header"}, &out)
	fmt.Println("exported:", n, err, bytes.Count(out.Bytes(), []byte("\n")), "line")
	// Output:
	// b: permanent, error: retry: permanent error (attempt 1): invalid image header
	// c: permanent, network: retry: permanent error (attempt 1): dial tcp 10.0.0.7:443: connect: connection refused
	// network errors: 1
	// exported: 1 <nil> 1 line
}
