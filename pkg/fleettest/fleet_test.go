package fleettest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// noLeaks checks, after every other cleanup, that the fleet left no
// goroutine behind.
func noLeaks(t *testing.T) {
	natstest.VerifyNoLeaks(t)
}

func noop(context.Context, *agent.Call) (any, error) { return nil, nil }

func specWith(pool string, steps ...messages.Step) *messages.JobSpec {
	return &messages.JobSpec{Pool: pool, Items: []json.RawMessage{json.RawMessage(`{"id":"a"}`)}, AgentTemplate: steps}
}

// A step naming a handler no agent of the pool registers is refused at
// submission with the step's field, through the API and the durable
// intake; a pool with no agent yet accepts it.
func TestSubmitRefusesUnregisteredHandler(t *testing.T) {
	noLeaks(t)
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{"known": noop}, fleettest.WithAgents(2))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := f.Client.JobSubmitSpec(ctx, specWith("", messages.Step{Handler: "known"}, messages.Step{Handler: "missing"}))
	var apiErr *messages.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, messages.CodeInvalid, apiErr.Code)
	require.Equal(t, "agent_template[1].handler", apiErr.Field)
	require.Contains(t, apiErr.Message, `agent_template[1].handler: no agent of pool "default" registers handler "missing"`)

	reduce := specWith("", messages.Step{Handler: "known"})
	reduce.Reduce = []messages.Step{{Handler: "gone"}}
	_, err = f.Client.JobSubmitSpec(ctx, reduce)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "reduce[0].handler", apiErr.Field)

	// A pool nobody serves yet takes the job, for agents to come.
	reply, err := f.Client.JobSubmitSpec(ctx, specWith("later", messages.Step{Handler: "missing"}))
	require.NoError(t, err)
	require.False(t, messages.TerminalState(reply.State))

	// The durable intake (nats pub fleet.jobs.submit) rejects it, and Wait
	// hears of the rejection.
	body, err := json.Marshal(&messages.JobSpec{ID: "durable", Items: []json.RawMessage{json.RawMessage(`1`)},
		AgentTemplate: []messages.Step{{Handler: "missing"}}})
	require.NoError(t, err)
	names, err := messages.NewNames(f.Prefix)
	require.NoError(t, err)
	_, err = f.Server.JS().Publish(ctx, names.JobsSubmitSubject(), body)
	require.NoError(t, err)
	st, err := f.Client.JobWait(ctx, "durable", 0, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateRejected, st.State)
	require.NotEmpty(t, st.Problems)
	require.Equal(t, "agent_template[0].handler", st.Problems[0].Field)

	// A registered handler runs.
	st = f.Run(t, specWith("", messages.Step{Handler: "known"}), time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
}

// Wait learns of the end from the job's events: it reads the status once
// before and once after, however short its interval, where a poll would
// read it every interval.
func TestWaitLearnsTheEndFromEvents(t *testing.T) {
	noLeaks(t)
	release := make(chan struct{})
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{
		"gate": func(ctx context.Context, _ *agent.Call) (any, error) {
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	names, err := messages.NewNames(f.Prefix)
	require.NoError(t, err)
	var reads atomic.Int64
	sub, err := f.Server.Conn().Subscribe(names.APISubject(messages.EndpointJobsStatus), func(*nats.Msg) { reads.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, f.Server.Conn().Flush())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reply, err := f.Client.JobSubmitSpec(ctx, specWith("", messages.Step{Handler: "gate"}))
	require.NoError(t, err)
	done := make(chan *messages.JobStatus, 1)
	go func() {
		st, err := f.Client.JobWait(ctx, reply.JobID, time.Millisecond, nil)
		if err != nil {
			st = &messages.JobStatus{State: "wait: " + err.Error()}
		}
		done <- st
	}()
	// Wait has read the status once and now waits for an event.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if reads.Load() < 1 {
			return errors.New("no status read yet")
		}
		return nil
	})
	select {
	case st := <-done:
		t.Fatalf("Wait returned before the job ended: %+v", st)
	case <-time.After(200 * time.Millisecond): // a poll every 1ms would read ~200 times meanwhile
	}
	close(release)
	st := <-done
	require.Equal(t, messages.StateSucceeded, st.State)
	require.LessOrEqual(t, reads.Load(), int64(3), "status reads: one before, one after the event")
}

func TestRunFleetOptions(t *testing.T) {
	f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{"noop": noop},
		fleettest.WithAgents(3), fleettest.WithConcurrency(2), fleettest.WithPool("blue"),
		fleettest.WithAgentConfig(func(i int, cfg *agent.Config) { cfg.ShutdownTimeout = time.Second }))
	require.Len(t, f.Agents, 3)
	require.Equal(t, "blue", f.Pool)
	require.Equal(t, []string{agent.HTTPHandlerName, "noop"}, f.Agents[2].Handlers(), "the http handler is built in")
	st := f.Run(t, specWith("blue", messages.Step{Handler: "noop"}), time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
}

// TestConstantsAreNatstests keeps this package's constants equal to the
// helpers' own, which the servers use.
func TestConstantsAreNatstests(t *testing.T) {
	require.Equal(t, natstest.ClusterName, fleettest.ClusterName)
	require.Equal(t, natstest.DefaultReadyTimeout, fleettest.DefaultReadyTimeout)
	require.Equal(t, natstest.PollInterval, fleettest.PollInterval)
}
