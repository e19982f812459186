package auth_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An agent running as its role's user serves its micro service: the
// operator's `nats micro stats jetfleet-agent` reaches it, and the agent
// is refused nothing.
func TestAgentServesMicroUnderItsRole(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, provision.Ensure(ctx, s.srv.JS(), s.names, provision.Config{}))
	cnc, _ := s.connect(t, "coordinator")
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ag, aerrs, done := s.startAgent(t, ctx, runCtx, cjs)

	onc, oerrs := s.connect(t, "operator")
	subject, err := micro.ControlSubject(micro.StatsVerb, messages.AgentServiceName, "")
	require.NoError(t, err)
	var st micro.Stats
	require.Eventually(t, func() bool {
		m, err := onc.Request(subject, nil, time.Second)
		return err == nil && json.Unmarshal(m.Data, &st) == nil
	}, 30*time.Second, 50*time.Millisecond, "the agent's micro service answers the operator")
	require.Len(t, st.Endpoints, 1)
	var data messages.AgentStats
	require.NoError(t, json.Unmarshal(st.Endpoints[0].Data, &data))
	require.Equal(t, messages.DefaultPool, data.Pool)
	// The operator reaches the agent's status endpoint too.
	m, err := onc.Request(st.Endpoints[0].Subject, nil, 5*time.Second)
	require.NoError(t, err)
	var p messages.AgentPresence
	require.NoError(t, json.Unmarshal(m.Data, &p))
	require.Equal(t, ag.Name(), p.Name)

	stop()
	require.NoError(t, <-done)
	require.Empty(t, aerrs.violations())
	require.Empty(t, oerrs.violations())
}
