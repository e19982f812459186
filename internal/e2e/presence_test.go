package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An agent's presence in the agents bucket says who it is, which pool it
// pulls and which items it runs, refreshed every interval; it is gone
// once the agent stops.
func TestAgentPresence(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	a := startAgent(t, srv.URL(), agent.Config{Name: "host.example-7", Concurrency: 3, PresenceInterval: 100 * time.Millisecond}, nil)
	c := client(t, srv)
	submit(t, c, `{"id": "present", "items": [{"id": "a"}, {"id": "b"}],
		"agent_template": [{"handler": "sleep", "with": {"duration": "1m"}}]}`)

	ctx := context.Background()
	kv, err := srv.JS().KeyValue(ctx, messages.MustNames("").AgentsBucket())
	require.NoError(t, err)
	key := wire.AgentKey("default", "host.example-7")
	presence := func() (messages.AgentPresence, error) {
		var p messages.AgentPresence
		e, err := kv.Get(ctx, key)
		if err == nil {
			err = json.Unmarshal(e.Value(), &p)
		}
		return p, err
	}
	var first messages.AgentPresence
	fleettest.WaitFor(t, 20*time.Second, func() error {
		p, err := presence()
		if err != nil {
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
		p, err := presence()
		if err != nil {
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

// A result of a job with several steps says what each step took: a step
// retried once ran twice; the steps done in earlier deliveries are kept.
func TestResultStepBreakdown(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{}, nil)
	c := client(t, srv)
	id := submit(t, c, `{"id": "steps", "items": [{"id": "a"}],
		"agent_template": [{"handler": "noop"},
			{"handler": "flaky", "with": {"fail_attempts": 1}, "retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms"}},
			{"handler": "noop"}]}`)
	st := waitJob(t, c, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded)

	ctx := context.Background()
	stream, err := srv.JS().Stream(ctx, messages.MustNames("").ResultsStream())
	require.NoError(t, err)
	m, err := stream.GetLastMsgForSubject(ctx, messages.MustNames("").ResultSubject(messages.DefaultPool, id))
	require.NoError(t, err)
	rs, err := wire.DecodeResults(m.Data, nil)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	res := rs[0]
	require.Equal(t, 2, res.Attempts)
	require.Len(t, res.Steps, 3, "%+v", res.Steps)
	runs := []int{res.Steps[0].Runs, res.Steps[1].Runs, res.Steps[2].Runs}
	require.Equal(t, []int{1, 2, 1}, runs)
	for i, s := range res.Steps {
		require.Equal(t, i, s.Step)
	}
}
