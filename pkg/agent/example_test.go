package agent_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/agent"
)

var errThrottled = errors.New("429 too many requests")

// A handler steers retries with marker errors: a bad item is permanent,
// a throttled call asks to be retried after the server's delay.
func ExampleHandlerFunc() {
	upload := func(_ context.Context, c *agent.Call) (any, error) {
		var item struct{ Path string }
		if err := c.Decode(&item); err != nil || item.Path == "" {
			return nil, agent.Permanent(fmt.Errorf("item %s has no path", c.ItemID))
		}
		if c.Attempt == 1 {
			return nil, agent.After(30*time.Second, errThrottled)
		}
		return "uploaded " + item.Path, nil
	}

	for attempt, raw := range []string{`{"path": "a.jpg"}`, `{"path": "a.jpg"}`, `{}`} {
		out, err := upload(context.Background(), &agent.Call{ItemID: "x", Attempt: attempt + 1, Item: []byte(raw)})
		d, after := agent.AfterDelay(err)
		fmt.Printf("attempt %d: out=%v permanent=%v retry_after=%v(%s)\n", attempt+1, out, agent.IsPermanent(err), after, d)
	}
	// Output:
	// attempt 1: out=<nil> permanent=false retry_after=true(30s)
	// attempt 2: out=uploaded a.jpg permanent=false retry_after=false(0s)
	// attempt 3: out=<nil> permanent=true retry_after=false(0s)
}
