package jobrun

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A result written in a newer schema version than this coordinator reads
// is left in the results stream uncounted, live and when a coordinator
// reads the job's results again after a restart: the job does not end on
// it. Results of this version (and those without "v", from before v0.4.0)
// count as ever.
func TestNewerResultsAreLeftUncounted(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	names := messages.MustNames("")
	ctx := context.Background()
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, testProv))
	_, p := startCoord(t, srv, Config{})
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	reply, err := cl.Submit(ctx, []byte(`{"id": "schema", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "agent_template": [{"shell": "true"}]}`))
	require.NoError(t, err)

	publish := func(body string) {
		t.Helper()
		_, err := srv.JS().Publish(ctx, names.ResultSubject(messages.DefaultPool, reply.JobID), []byte(body))
		require.NoError(t, err)
	}
	result := func(v, item string, index int) string {
		return fmt.Sprintf(`{%s"job_id":%q,"item_id":%q,"index":%d,"outcome":"succeeded","generation":0,"attempts":1,"retries":0,"agent":"x","finished_at":"2026-11-28T12:00:00Z","duration_ms":1}`,
			v, reply.JobID, item, index)
	}
	newer := fmt.Sprintf(`"v":%d,`, messages.SchemaVersion+1)
	publish(result(newer, "b", 1))                                                         // newer: left
	publish(`{"v":` + fmt.Sprint(messages.SchemaVersion+1) + `,"job_id":{"id":"schema"}}`) // newer, and not decodable here: left
	publish(`[` + result("", "a", 0) + `]`)                                                // before v0.4.0: counts
	waitSucceeded := func(n int64) *messages.JobStatus {
		t.Helper()
		var st *messages.JobStatus
		fleettest.WaitFor(t, 20*time.Second, func() error {
			if st, err = cl.Status(ctx, reply.JobID); err != nil {
				return err
			}
			if st.Succeeded != n {
				return fmt.Errorf("succeeded %d, want %d", st.Succeeded, n)
			}
			return nil
		})
		return st
	}
	// Results apply in stream order: once a counts, b's was read and left.
	st := waitSucceeded(1)
	require.Equal(t, messages.StateRunning, st.State)

	// A restarted coordinator reads the job's results from the start and
	// leaves b's again.
	p.stop(t)
	_, p = startCoord(t, srv, Config{})
	defer p.stop(t)
	publish(result(`"v":`+fmt.Sprint(messages.SchemaVersion)+`,`, "c", 2))
	st = waitSucceeded(2)
	require.Equal(t, messages.StateRunning, st.State, "b's result is not counted")

	publish(result("", "b", 1))
	st = waitEnd(t, cl, reply.JobID)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 3, st.Succeeded)
	require.EqualValues(t, 3, st.Items)
}

// An API request of a newer schema version (its header) is answered
// unavailable, so that its client asks again; one of this version, or
// without the header (before v0.4.0), is answered.
func TestNewerRequestIsAnsweredUnavailable(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	names := messages.MustNames("")
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	ask := func(v string) string {
		t.Helper()
		m := nats.NewMsg(names.APISubject(messages.EndpointJobsList))
		if v != "" {
			m.Header.Set(messages.HeaderSchema, v)
		}
		r, err := srv.Conn().RequestMsg(m, 10*time.Second)
		require.NoError(t, err)
		return string(r.Data)
	}
	require.Contains(t, ask(fmt.Sprint(messages.SchemaVersion+1)), `"code":"unavailable"`)
	require.Contains(t, ask("x"), `"code":"bad_request"`)
	require.NotContains(t, ask(fmt.Sprint(messages.SchemaVersion)), `"code"`)
	require.NotContains(t, ask(""), `"code"`)
}
