package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// discover asks every micro service on the connection what `nats micro`
// asks (verb PING, INFO or STATS on $SRV.<VERB>) and returns the replies
// that arrive within wait, as `nats micro ls` does.
func discover[T any](t *testing.T, nc *nats.Conn, verb micro.Verb, wait time.Duration) []T {
	t.Helper()
	subject, err := micro.ControlSubject(verb, "", "")
	require.NoError(t, err)
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.PublishRequest(subject, inbox, nil))
	var out []T
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) {
			return out
		}
		require.NoError(t, err)
		var v T
		require.NoError(t, json.Unmarshal(m.Data, &v), "%s reply %s", verb, m.Data)
		out = append(out, v)
	}
}

// The whole fleet answers the micro discovery subjects that `nats micro
// ls/info/stats` use: the coordinator (jetfleet) and each agent
// (jetfleet-agent) with its pool, handlers and concurrency in its
// metadata, and its items run and failures in its stats.
func TestFleetIsVisibleToMicroTools(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	boom := map[string]agent.HandlerFunc{"boom": func(_ context.Context, call *agent.Call) (any, error) {
		if call.ItemID == "bad" {
			return nil, retry.Permanent(errors.New("boom"))
		}
		return nil, nil
	}}
	startAgent(t, srv.URL(), agent.Config{Name: "a1.example", Concurrency: 2}, boom)
	startAgent(t, srv.URL(), agent.Config{Name: "a2.example", Concurrency: 3}, boom)
	c := client(t, srv)
	submit(t, c, `{"id": "seen", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "bad"}],
		"agent_template": [{"handler": "boom"}]}`)
	st := waitJob(t, c, "seen", 30*time.Second)
	require.EqualValues(t, 3, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)

	nc := srv.Conn()
	// The discovery waits for the replies of three services; more would
	// be a failure too.
	const wait = 2 * time.Second
	pings := discover[micro.Ping](t, nc, micro.PingVerb, wait)
	var names []string
	for _, p := range pings {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	require.Equal(t, []string{messages.ServiceName, messages.AgentServiceName, messages.AgentServiceName}, names)

	infos := discover[micro.Info](t, nc, micro.InfoVerb, wait)
	agents := map[string]micro.Info{}
	for _, in := range infos {
		if in.Name == messages.AgentServiceName {
			agents[in.Metadata["agent"]] = in
		}
	}
	require.Len(t, agents, 2, "%+v", infos)
	a1 := agents["a1.example"]
	require.Equal(t, messages.DefaultPool, a1.Metadata["pool"])
	require.Equal(t, "2", a1.Metadata["concurrency"])
	require.Equal(t, "3", agents["a2.example"].Metadata["concurrency"])
	require.Contains(t, a1.Metadata["handlers"], "boom")
	require.Equal(t, version.Get().Semver(), a1.Version)
	require.Len(t, a1.Endpoints, 1)
	require.Equal(t, wire.AgentStatusSubject(messages.MustNames(""), messages.DefaultPool, "a1.example"), a1.Endpoints[0].Subject)

	// The counters: the four items ran on the two agents, one failed.
	stats := discover[micro.Stats](t, nc, micro.StatsVerb, wait)
	var run, failed int64
	seen := 0
	for _, s := range stats {
		if s.Name != messages.AgentServiceName {
			continue
		}
		seen++
		require.Len(t, s.Endpoints, 1)
		var data messages.AgentStats
		require.NoError(t, json.Unmarshal(s.Endpoints[0].Data, &data), "%s", s.Endpoints[0].Data)
		require.Equal(t, messages.DefaultPool, data.Pool)
		require.Zero(t, data.InFlight)
		run += data.ItemsRun
		failed += data.Failures
	}
	require.Equal(t, 2, seen)
	require.EqualValues(t, 4, run)
	require.EqualValues(t, 1, failed)

	// The status endpoint replies with the agent's presence.
	m, err := nc.Request(a1.Endpoints[0].Subject, nil, 5*time.Second)
	require.NoError(t, err)
	var p messages.AgentPresence
	require.NoError(t, json.Unmarshal(m.Data, &p))
	require.Equal(t, "a1.example", p.Name)
	require.Equal(t, 2, p.Concurrency)
}
