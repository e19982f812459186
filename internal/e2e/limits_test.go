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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
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
func ordinaryJob(t testing.TB, cl *jfclient.Client, id string) {
	t.Helper()
	spec := fmt.Sprintf(`{"id": %q, "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "agent_template": [{"handler": "noop"}]}`, id)
	st := waitJob(t, cl, submit(t, cl, spec), 30*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "the ordinary job after the bad input: %+v", st)
	require.EqualValues(t, 3, st.Succeeded)
}

// survived checks that the coordinator and the agent are still up and that
// an ordinary job (id) succeeds.
func survived(t testing.TB, cl *jfclient.Client, coord, ag *proc, id string) {
	t.Helper()
	requireAlive(t, "coordinator", coord)
	requireAlive(t, "agent", ag)
	ordinaryJob(t, cl, id)
}

// Case 1: a 5,000-character item id once became a KV key and a msg id over
// the server's 4 KiB control line; the server closed the connection of
// every agent that ran the item (and of the coordinator's DLQ mover after
// MaxDeliver), and both binaries exited.
func TestLongItemIDNeitherKillsAgentNorCoordinator(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	prov := testProvision
	prov.AckWait, prov.MaxDeliver = time.Second, 2
	coord := startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov)})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	ag := startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 8, Heartbeat: time.Hour}, testhooks.Agent{Provision: prov}),
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

	survived(t, cl, coord, ag, "after-long-ids")
}

// A request naming a job by something that is not a job id (once passed
// to the server as a KV key, closing the coordinator's connection) is
// refused with the field.
func TestStatusOfLongJobIDRefused(t *testing.T) {
	t.Parallel()
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
	survived(t, cl, coord, ag, "after-long-job-id")
}

// A forged work message naming a long job id in its body is dead-lettered
// as poison, not passed to the server as a KV key.
func TestForgedWorkMessageJobIDIsPoison(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision{}})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	ordinaryJob(t, cl, "creates-the-pool")
	names := messages.MustNames("")
	body, err := json.Marshal(wire.WorkItem{JobID: strings.Repeat("j", 5000), ItemID: "i", Payload: json.RawMessage(`{}`)})
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
	survived(t, cl, coord, ag, "after-forged")
}

// putInput uploads data as fleetctl submit does and returns its ref.
func putInput(t testing.TB, srv *fleettest.Server, name string, data []byte) string {
	t.Helper()
	names := messages.MustNames("")
	_, err := upload.PutBytes(context.Background(), srv.JS(), names.UploadsBucket(), name, data)
	require.NoError(t, err)
	return "objstore://" + names.UploadsBucket() + "/" + name
}

// smallPayload runs the server with a 128 KiB max_payload, so that items
// "near max_payload" are quick to build.
func smallPayload() fleettest.Option {
	return fleettest.WithConfig(func(o *server.Options) { o.MaxPayload = 128 << 10 })
}

// rejected waits for job id to be rejected and returns its problems.
func rejected(t testing.TB, cl *jfclient.Client, id string) []messages.FieldError {
	t.Helper()
	var st *messages.JobStatus
	fleettest.WaitFor(t, 20*time.Second, func() error {
		var err error
		if st, err = cl.JobStatus(context.Background(), id); err != nil {
			return err
		}
		if st.State != messages.StateRejected {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	require.NotEmpty(t, st.Problems)
	return st.Problems
}

// Case 2: an item larger than max_payload once made the coordinator retry
// its publish forever (job running, published 0, nothing logged); now the
// job is refused when accepted, with the item's path, size and the limit.
func TestItemOverMaxPayloadRefused(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t, smallPayload())
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)

	// From an input: the job is rejected, naming the item.
	big := fmt.Sprintf(`[{"id": "ok"}, {"id": "huge", "blob": %q}]`, strings.Repeat("x", 200<<10))
	ref := putInput(t, srv, "big/items.json", []byte(big))
	submit(t, cl, fmt.Sprintf(`{"id": "big-input", "input": %q, "agent_template": [{"handler": "noop"}]}`, ref))
	ps := rejected(t, cl, "big-input")
	require.Equal(t, "input", ps[0].Field)
	require.Contains(t, ps[0].Message, `item 1 (id "huge"): its work message would be `)
	require.Contains(t, ps[0].Message, "the limit is 114688 (the server's max_payload 131072 less 16384 kept for its dead-letter entry and result)")

	// Inline: refused with the request (the spec itself is too large to
	// keep; a smaller item would have passed).
	near := fmt.Sprintf(`{"id": "big-inline", "items": [{"id": "a"}, {"blob": %q}], "agent_template": [{"handler": "noop"}]}`, strings.Repeat("x", 115<<10))
	_, err := cl.JobSubmit(context.Background(), []byte(near))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeInvalid, ae.Code)
	require.Equal(t, "items", ae.Field)
	require.Contains(t, ae.Message, "put large item lists in an input file")

	survived(t, cl, coord, ag, "after-big-items")
}

// Case 2, second half: an item near max_payload that fails many times once
// made a DLQ entry (payload and history) over the limit, which the agent
// retried forever. The entry now drops its oldest attempts to fit.
func TestDeadLetterOfANearMaxPayloadItemFits(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t, smallPayload())
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	longErr := strings.Repeat("e", 3000)
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, map[string]agent.HandlerFunc{
		"fail": func(context.Context, *agent.Call) (any, error) { return nil, errors.New(longErr) },
	})
	cl := client(t, srv)
	spec := fmt.Sprintf(`{"id": "near", "items": [{"id": "n", "blob": %q}], "retry_budget": 100,
		"agent_template": [{"handler": "fail", "retry_config": {"attempts": 40, "initial_delay": "1ms", "max_delay": "1ms"}}]}`,
		strings.Repeat("x", 100<<10))
	st := waitJob(t, cl, submit(t, cl, spec), 30*time.Second)
	require.EqualValues(t, 1, st.DeadLettered)
	entries := dlqEntries(t, cl, "near")
	require.Len(t, entries, 1)
	e := entries[0].Entry
	require.Positive(t, e.AttemptsDropped, "40 attempts of 2 KiB each do not fit beside a 100 KiB payload")
	require.Equal(t, 40, e.AttemptsDropped+len(e.Attempts))
	require.Equal(t, 40, e.Attempts[len(e.Attempts)-1].Attempt, "the newest attempt is kept")
	require.Len(t, e.Payload, len(`{"id":"n","blob":""}`)+100<<10, "the payload is whole")
	survived(t, cl, coord, ag, "after-near")
}

// Case 3: the durable intake once skipped the API's size limit, and a spec
// whose record exceeded max_payload was NAKed every 2 s forever. It now
// applies every check the API applies and rejects with the reason.
func TestDurableIntakeAppliesTheAPIChecks(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{MaxSpecBytes: 64 << 10})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	names := messages.MustNames("")
	items := func(n, size int) string {
		return itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i, "pad": strings.Repeat("p", size)} })
	}
	oversize := fmt.Sprintf(`{"id": "oversize", "items": %s, "agent_template": [{"handler": "noop"}]}`, items(100, 1000))

	// The API refuses it...
	_, err := cl.JobSubmit(context.Background(), []byte(oversize))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeTooLarge, ae.Code)
	// ...and so does the durable intake.
	_, err = srv.JS().Publish(context.Background(), names.JobsSubmitSubject(), []byte(oversize))
	require.NoError(t, err)
	ps := rejected(t, cl, "oversize")
	require.Contains(t, ps[0].Message, "the limit is 65536 (--max-spec-bytes)")

	survived(t, cl, coord, ag, "after-oversize")
}

// Case 3 with the default limits: a spec under --max-spec-bytes whose
// record (the spec as accepted, plus its status) would not fit the
// server's max_payload.
func TestDurableSpecOverMaxPayloadRejected(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t, smallPayload())
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	cl := client(t, srv)
	names := messages.MustNames("")
	spec := fmt.Sprintf(`{"id": "fat", "items": %s, "agent_template": [{"handler": "noop"}]}`,
		itemsJSON(120, func(i int) map[string]any { return map[string]any{"id": i, "pad": strings.Repeat("p", 1000)} }))
	require.Less(t, len(spec), 128<<10)
	_, err := srv.JS().Publish(context.Background(), names.JobsSubmitSubject(), []byte(spec))
	require.NoError(t, err)
	ps := rejected(t, cl, "fat")
	require.Contains(t, ps[0].Message, "put large item lists in an input file")
	survived(t, cl, coord, startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil), "after-fat")
}

// Case 4: thousands of distinct error signatures once made the job record
// too large to write: the job never ended and jobs.status failed. The
// report keeps the most frequent signatures and counts the rest.
func TestErrorReportIsBounded(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t, smallPayload())
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	word := func(i int) string { // letters only: signatures ignore numbers
		return strings.Map(func(r rune) rune { return 'g' + (r - '0') }, fmt.Sprint(i))
	}
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 32}, map[string]agent.HandlerFunc{
		// Every tenth item fails with one of 5 common errors, each other one
		// with an error of its own: 1,805 signatures.
		"distinct": func(_ context.Context, c *agent.Call) (any, error) {
			if c.Index%10 == 0 {
				return nil, retry.Permanent(fmt.Errorf("common failure %s", word(int(c.Index/10)%5)))
			}
			return nil, retry.Permanent(fmt.Errorf("failure %s %s", word(int(c.Index)), strings.Repeat("w", 60)))
		},
	})
	cl := client(t, srv)
	const n = 2000
	spec := fmt.Sprintf(`{"id": "sigs", "items": %s, "agent_template": [{"handler": "distinct"}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i} }))
	// A bound on the wait, not a speed: 2,000 dead letters beside other
	// tests under -race on two loaded cores took over a minute.
	st := waitJob(t, cl, submit(t, cl, spec), 3*time.Minute)
	require.EqualValues(t, n, st.DeadLettered)
	require.Len(t, st.Errors, coordinator.DefaultErrorSignatures)
	var counted int64
	for i, e := range st.Errors {
		if i < 5 {
			require.EqualValues(t, 40, e.Count, "the most frequent signatures are kept, exactly counted")
			require.Contains(t, e.Message, "common failure")
		}
		counted += e.Count
	}
	require.EqualValues(t, n, counted+st.ErrorsOther, "every failure is counted")
	survived(t, cl, coord, ag, "after-sigs")
}

// Case 5: expansion limits. A job with more items than --max-items, and a
// json_path that selects or visits more than --max-path-nodes nodes (a
// recursive path over a 120-byte document once selected 455,000 nodes and
// took 230 MB), are refused with the field.
func TestExpansionLimits(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{MaxItems: 100, MaxPathNodes: 100_000})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	names := messages.MustNames("")

	many := fmt.Sprintf(`{"id": "many", "items": %s, "agent_template": [{"handler": "noop"}]}`,
		itemsJSON(101, func(i int) map[string]any { return map[string]any{"id": i} }))
	_, err := cl.JobSubmit(context.Background(), []byte(many))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "items", ae.Field)
	require.Contains(t, ae.Message, "more than 100 items; the limit is 100")
	_, err = srv.JS().Publish(context.Background(), names.JobsSubmitSubject(), []byte(many))
	require.NoError(t, err)
	require.Equal(t, "items", rejected(t, cl, "many")[0].Field)

	ref := putInput(t, srv, "deep.json", []byte(strings.Repeat("[", 60)+strings.Repeat("]", 60)))
	submit(t, cl, fmt.Sprintf(`{"id": "recursive", "input": %q, "json_path": "$..*..*..*..*", "agent_template": [{"handler": "noop"}]}`, ref))
	ps := rejected(t, cl, "recursive")
	require.Equal(t, "json_path", ps[0].Field)
	require.Contains(t, ps[0].Message, "selects or visits more than 100000 nodes")

	survived(t, cl, coord, ag, "after-expansion")
}

// waitReplaced waits until the rejected job id is accepted again, then
// until it ends.
func waitReplaced(t testing.TB, cl *jfclient.Client, id string) *messages.JobStatus {
	t.Helper()
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.JobStatus(context.Background(), id)
		if err == nil && st.State == messages.StateRejected {
			err = fmt.Errorf("still rejected: %v", st.Problems)
		}
		return err
	})
	return waitJob(t, cl, id, 30*time.Second)
}

// Case 12, first half: a rejected submission once reserved its id, and the
// corrected job came back "already submitted". Its id is free again,
// through the API and the durable intake, and an identical resubmission
// stays idempotent.
func TestRejectedIDCanBeSubmittedAgain(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{})
	ag := startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	names := messages.MustNames("")

	// API: the input turns out malformed when the job is accepted.
	bad := putInput(t, srv, "fix/bad.json", []byte(`[{"id": "a"}, {"id": `))
	good := putInput(t, srv, "fix/good.json", []byte(`[{"id": "a"}, {"id": "b"}]`))
	spec := func(ref string) []byte {
		return []byte(fmt.Sprintf(`{"id": "fixme", "input": %q, "agent_template": [{"handler": "noop"}]}`, ref))
	}
	submit(t, cl, string(spec(bad)))
	require.Equal(t, "input", rejected(t, cl, "fixme")[0].Field)
	reply, err := cl.JobSubmit(context.Background(), spec(good))
	require.NoError(t, err)
	require.False(t, reply.Existing, "the corrected job is new")
	st := waitReplaced(t, cl, "fixme")
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 2, st.Succeeded)
	reply, err = cl.JobSubmit(context.Background(), spec(good))
	require.NoError(t, err)
	require.True(t, reply.Existing, "resubmitting an accepted job is idempotent")

	// Durable path: invalid, then corrected under the same id, both
	// published as a user would (nats pub, no msg id).
	_, err = srv.JS().Publish(context.Background(), names.JobsSubmitSubject(), []byte(`{"id": "fixme2", "agent_template": []}`))
	require.NoError(t, err)
	rejected(t, cl, "fixme2")
	_, err = srv.JS().Publish(context.Background(), names.JobsSubmitSubject(), []byte(`{"id": "fixme2", "items": [1, 2, 3], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	st = waitReplaced(t, cl, "fixme2")
	require.Equal(t, messages.StateSucceeded, st.State)

	requireAlive(t, "coordinator", coord)
	requireAlive(t, "agent", ag)
}
