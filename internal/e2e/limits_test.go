package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Tests of docs/security.md "Limits": input that once crashed, hung or
// looped the fleet. Each one checks that the processes stay up, that the
// job is refused with the field's path or ends with a clear reason, and
// that an ordinary job submitted afterwards succeeds.

// requireAlive fails if p has exited (a daemon that died on bad input), or
// if the server closed its connection.
func requireAlive(t testing.TB, name string, p *proc) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // let stop see it too
		t.Fatalf("%s exited: %v", name, err)
	default:
	}
	require.False(t, p.nc.IsClosed(), "%s's connection was closed (last error: %v)", name, p.nc.LastError())
}

// ordinaryJob runs a small job to success: the fleet still works.
func ordinaryJob(t testing.TB, cl *coordinator.Client, id string) {
	t.Helper()
	spec := fmt.Sprintf(`{"id": %q, "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "agent_template": [{"handler": "noop"}]}`, id)
	st := waitJob(t, cl, submit(t, cl, spec), 30*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "the ordinary job after the bad input: %+v", st)
	require.EqualValues(t, 3, st.Succeeded)
}

// Case 1: a 5,000-character item id once became a KV key and a msg id over
// the server's 4 KiB control line; the server closed the connection of
// every agent that ran the item (and of the coordinator's DLQ mover after
// MaxDeliver), and both binaries exited.
func TestLongItemIDNeitherKillsAgentNorCoordinator(t *testing.T) {
	srv := fleettest.RunServer(t)
	prov := testProvision
	prov.AckWait, prov.MaxDeliver = time.Second, 2
	coord := startCoordinator(t, srv.URL(), coordinator.Config{Provision: prov})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 8, Provision: prov, Heartbeat: time.Hour},
		map[string]agent.HandlerFunc{
			// Hangs past AckWait without heartbeats: every delivery is lost,
			// so the DLQ mover dead-letters the item after MaxDeliver.
			"hang": func(ctx context.Context, _ *agent.Call) (any, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, errors.New("released")
			},
		})
	cl := client(t, srv)
	long := strings.Repeat("x", 5000)

	// The agent path: the item fails, its retry state and DLQ entry are
	// keyed by its id.
	failing := fmt.Sprintf(`{"id": "long-fails", "items": [{"id": %q, "n": 1}],
		"agent_template": [{"shell": "exit 3", "retry_config": {"attempts": 2, "initial_delay": "10ms"}}]}`, long)
	st := waitJob(t, cl, submit(t, cl, failing), 30*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 1, st.DeadLettered)
	entries := dlqEntries(t, cl, "long-fails")
	require.Len(t, entries, 1)
	require.Equal(t, long, entries[0].Entry.ItemID, "the id is kept whole in the entry")
	require.Len(t, entries[0].Entry.Attempts, 2)

	// The mover path: the item's deliveries are lost until MaxDeliver.
	hanging := fmt.Sprintf(`{"id": "long-hangs", "items": [{"id": %q}], "agent_template": [{"handler": "hang"}]}`, long+"y")
	st = waitJob(t, cl, submit(t, cl, hanging), 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)
	entries = dlqEntries(t, cl, "long-hangs")
	require.Len(t, entries, 1)
	require.Equal(t, messages.ReasonMaxDeliveries, entries[0].Entry.Reason)
	require.Equal(t, long+"y", entries[0].Entry.ItemID)

	// A replay of the long-id entry republishes it under its hashed msg id.
	once.Do(func() { close(release) })
	rs, err := cl.DLQReplay(context.Background(), messages.DLQReplayRequest{DLQFilter: messages.DLQFilter{JobID: "long-fails"}, Wait: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, rs.Replayed, "replay: %+v", rs)

	requireAlive(t, "coordinator", coord)
	requireAlive(t, "agent", ag)
	ordinaryJob(t, cl, "after-long-ids")
}

// A request naming a job by something that is not a job id (once passed
// to the server as a KV key, closing the coordinator's connection) is
// refused with the field.
func TestStatusOfLongJobIDRefused(t *testing.T) {
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	for _, ep := range []string{messages.EndpointJobsStatus, messages.EndpointJobsCancel} {
		err := cl.Call(context.Background(), ep, messages.JobRequest{JobID: strings.Repeat("j", 5000)}, nil)
		var apiErr *messages.APIError
		require.ErrorAs(t, err, &apiErr, ep)
		require.Equal(t, messages.CodeBadRequest, apiErr.Code)
		require.Equal(t, "job_id", apiErr.Field)
	}
	requireAlive(t, "coordinator", coord)
	ordinaryJob(t, cl, "after-long-job-id")
	requireAlive(t, "agent", ag)
}

// A forged work message naming a long job id in its body is dead-lettered
// as poison, not passed to the server as a KV key.
func TestForgedWorkMessageJobIDIsPoison(t *testing.T) {
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{Provision: provision.Config{}})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	ordinaryJob(t, cl, "creates-the-pool")
	names := messages.MustNames("")
	body, err := json.Marshal(messages.WorkItem{JobID: strings.Repeat("j", 5000), ItemID: "i", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = srv.JS().Publish(context.Background(), names.WorkSubject("default", "forged"), body)
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		if n := len(dlqEntries(t, cl, "forged")); n != 1 {
			return fmt.Errorf("%d entries for job forged", n)
		}
		return nil
	})
	e := dlqEntries(t, cl, "forged")[0].Entry
	require.Equal(t, messages.ReasonPoison, e.Reason)
	require.Contains(t, e.Error, "job_id: not a job id")
	requireAlive(t, "coordinator", coord)
	requireAlive(t, "agent", ag)
	ordinaryJob(t, cl, "after-forged")
}
