package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An agent's presence in the agents bucket says who it is, which pool it
// pulls and which items it runs, refreshed every interval; it is gone
// once the agent stops.
func TestAgentPresence(t *testing.T) {
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	a := startAgent(t, srv.URL(), agent.Config{Name: "host.example-7", Concurrency: 3, PresenceInterval: 100 * time.Millisecond}, nil)
	c := client(t, srv)
	submit(t, c, `{"id": "present", "items": [{"id": "a"}, {"id": "b"}],
		"agent_template": [{"handler": "sleep", "with": {"duration": "1m"}}]}`)

	ctx := context.Background()
	kv, err := srv.JS().KeyValue(ctx, messages.MustNames("").AgentsBucket())
	require.NoError(t, err)
	key := messages.AgentKey("default", "host.example-7")
	var first messages.AgentPresence
	fleettest.WaitFor(t, 20*time.Second, func() error {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		var p messages.AgentPresence
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return err
		}
		if p.InFlight != 2 || p.Jobs["present"] != 2 {
			return fmt.Errorf("presence %+v", p)
		}
		first = p
		return nil
	})
	require.Equal(t, "host.example-7", first.Name)
	require.Equal(t, "default", first.Pool)
	require.Equal(t, 3, first.Concurrency)
	require.Equal(t, messages.Duration(100*time.Millisecond), first.Interval)
	// It is refreshed: last_seen moves on.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		var p messages.AgentPresence
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return err
		}
		if !p.LastSeen.After(first.LastSeen) {
			return fmt.Errorf("last_seen still %s", p.LastSeen)
		}
		return nil
	})

	// A stopping agent's key goes (its sleeping items are cancelled and
	// handed back).
	a.stop(t)
	_, err = kv.Get(ctx, key)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
}
