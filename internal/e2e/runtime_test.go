package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// recorder counts handler runs per item and remembers when attempts ran.
type recorder struct {
	mu    sync.Mutex
	runs  map[string]int
	times map[string][]time.Time
}

func newRecorder() *recorder {
	return &recorder{runs: map[string]int{}, times: map[string][]time.Time{}}
}

func (r *recorder) handler(failFirst int) agent.HandlerFunc {
	return func(_ context.Context, c *agent.Call) (any, error) {
		r.mu.Lock()
		r.runs[c.ItemID]++
		r.times[c.ItemID] = append(r.times[c.ItemID], time.Now())
		r.mu.Unlock()
		if c.Attempt <= failFirst {
			return nil, fmt.Errorf("connection refused (attempt %d)", c.Attempt)
		}
		return "done " + c.ItemID, nil
	}
}

// total is the number of handler runs of every item.
func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.runs {
		n += c
	}
	return n
}

func (r *recorder) count(item string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[item]
}

func TestItemsFailTwiceThenSucceed(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	first, flaky := newRecorder(), newRecorder()
	handlers := map[string]agent.HandlerFunc{"first": first.handler(0), "flaky": flaky.handler(2)}
	for i := range 2 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 4}, handlers)
	}
	const n = 20
	const delay = 300 * time.Millisecond
	id := submit(t, client(t, srv), fmt.Sprintf(`{"id": "twice", "items": %s,
		"agent_template": [
			{"handler": "first"},
			{"handler": "flaky", "retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "%s"}}
		], "retry_budget": 1000}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("it-%02d", i)} }), delay))

	st := waitJob(t, client(t, srv), id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	require.EqualValues(t, 2*n, st.Retries, "each item retried exactly twice")
	require.Equal(t, 2*n, st.Budget.Consumed, "every retry claimed one budget unit")
	for i := range n {
		item := fmt.Sprintf("it-%02d", i)
		require.Equal(t, 1, first.count(item), "step 1 of %s must not re-run: retries resume at the failed step", item)
		require.Equal(t, 3, flaky.count(item), "step 2 of %s runs three times", item)
		ts := flaky.times[item]
		for k := 1; k < len(ts); k++ {
			require.GreaterOrEqual(t, ts[k].Sub(ts[k-1]), delay, "%s attempt %d ran before its backoff", item, k+1)
		}
	}
}

func TestAgentKilledMidItemIsRedelivered(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	started := make(chan string, 10)
	blocking := map[string]agent.HandlerFunc{"work": func(ctx context.Context, c *agent.Call) (any, error) {
		started <- c.ItemID
		<-ctx.Done() // hangs until the agent dies
		return nil, ctx.Err()
	}}
	victim := startAgent(t, srv.URL(), agent.Config{Name: "victim", Concurrency: 1}, blocking)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "crash", "items": [{"id": "x"}, {"id": "y"}, {"id": "z"}],
		"agent_template": [{"handler": "work"}]}`)
	var held string
	select {
	case held = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("victim never started an item")
	}
	victim.kill(t) // no ack, no nak: only AckWait brings the item back

	done := newRecorder()
	startAgent(t, srv.URL(), agent.Config{Name: "survivor", Concurrency: 2},
		map[string]agent.HandlerFunc{"work": done.handler(0)})
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 3, st.Succeeded)
	require.EqualValues(t, 0, st.Retries, "a crash redelivery is not a retry")
	require.Equal(t, 0, st.Budget.Consumed, "a crash redelivery spends no budget")
	require.Equal(t, 1, done.count(held), "the held item %s ran once on the survivor", held)
}

func TestCoordinatorRestartMidJob(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	coord := startCoordinator(t, srv.URL(), coordinator.Config{PublishBatch: 16})
	cl := client(t, srv)
	var runs atomic.Int64
	slow := map[string]agent.HandlerFunc{"work": func(ctx context.Context, c *agent.Call) (any, error) {
		runs.Add(1)
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
		}
		if c.Attempt == 1 && c.Index%7 == 0 {
			return nil, fmt.Errorf("timeout talking to downstream")
		}
		return nil, nil
	}}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, slow)
	const n = 300
	id := submit(t, cl, fmt.Sprintf(`{"id": "restart", "max_parallel": 40, "items": %s,
		"agent_template": [{"handler": "work", "retry_config": {"attempts": 2, "initial_delay": "20ms"}}],
		"retry_budget": 100}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i} })))
	waitDone(t, cl, id, 60)
	coord.stop(t)
	mid, err := cl.JobStatus(context.Background(), id)
	if err == nil { // the API is down, so this is the snapshot in KV
		require.Less(t, mid.Done(), int64(n))
	}
	startCoordinator(t, srv.URL(), coordinator.Config{PublishBatch: 16})
	st := waitJob(t, cl, id, 90*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	require.EqualValues(t, (n+6)/7, st.Retries, "exactly one retry per 7th item, counted once")
}

func TestServerRestartMidJob(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	cl := client(t, srv)
	work := map[string]agent.HandlerFunc{"work": func(ctx context.Context, c *agent.Call) (any, error) {
		select {
		case <-time.After(10 * time.Millisecond):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, work)
	const n = 200
	id := submit(t, cl, fmt.Sprintf(`{"id": "srvrestart", "max_parallel": 20, "items": %s,
		"agent_template": [{"handler": "work", "retry_config": {"attempts": 5, "initial_delay": "50ms"}}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": i} })))
	waitDone(t, cl, id, 40)
	srv.Restart(t)
	st := waitJob(t, cl, id, 120*time.Second)
	require.EqualValues(t, n, st.Succeeded, "every item succeeded after the server restart: %+v", st)
}

func TestShellInjectionIsInert(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 2}, nil)
	dir := t.TempDir()
	canary := filepath.Join(dir, "pwned")
	payloads := []string{
		"'; touch " + canary + " #",
		"$(touch " + canary + ")",
		"`touch " + canary + "`",
		"a\"b; touch " + canary,
		"line1\nline2; touch " + canary,
		"$HOME && touch " + canary,
	}
	var items []map[string]any
	for i, p := range payloads {
		items = append(items, map[string]any{"id": fmt.Sprintf("p%d", i), "v": p})
	}
	spec := fmt.Sprintf(`{"id": "inject", "items": %s, "agent_template": [
		{"shell": "printf '%%s' ${item.v} > %s/${item_id}.out"}]}`,
		itemsJSON(len(items), func(i int) map[string]any { return items[i] }), dir)
	st := waitJob(t, client(t, srv), submit(t, client(t, srv), spec), 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	_, err := os.Stat(canary)
	require.True(t, os.IsNotExist(err), "an injection payload ran a command")
	for i, p := range payloads {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("p%d.out", i)))
		require.NoError(t, err)
		require.Equal(t, p, string(got), "payload %d must arrive as one literal argument", i)
	}
}

func TestMalformedSubmissions(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	ctx := context.Background()

	// API path: every problem, with its field, at once.
	_, err := cl.JobSubmit(ctx, []byte(`{"id": "bad", "agent_template": [{"shell": "x", "timeout": "5 parsecs",
		"retry_config": {"retry_on": [{"pattern": "("}]}}], "items": [{"id": 1}], "bogus": true}`))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeInvalid, ae.Code)
	var fields []string
	for _, p := range ae.Problems {
		fields = append(fields, p.Field)
	}
	slices.Sort(fields)
	require.Subset(t, fields, []string{"agent_template[0].retry_config.retry_on[0].pattern", "agent_template[0].timeout", "bogus"})

	_, err = cl.JobSubmit(ctx, []byte(`{not json`))
	require.ErrorAs(t, err, &ae)

	// Durable path: recorded as rejected, readable by status.
	names := messages.MustNames("")
	_, err = srv.JS().Publish(ctx, names.JobsSubmitSubject(), []byte(`{"id": "durable-bad", "agent_template": []}`))
	require.NoError(t, err)
	_, err = srv.JS().Publish(ctx, names.JobsSubmitSubject(), []byte(`garbage`))
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.JobStatus(ctx, "durable-bad")
		if err != nil {
			return err
		}
		if st.State != messages.StateRejected || len(st.Problems) == 0 {
			return fmt.Errorf("state %s, problems %v", st.State, st.Problems)
		}
		return nil
	})

	// The coordinator keeps running: a valid job still completes.
	st := waitJob(t, cl, submit(t, cl, `{"items": [1, 2, 3], "agent_template": [{"handler": "noop"}]}`), 30*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)

	// Resubmitting an id is idempotent.
	spec := `{"id": "same", "items": [1], "agent_template": [{"handler": "noop"}]}`
	first := submit(t, cl, spec)
	waitJob(t, cl, first, 30*time.Second)
	reply, err := cl.JobSubmit(ctx, []byte(spec))
	require.NoError(t, err)
	require.True(t, reply.Existing)
}

// An item whose retries would outlast the consumer's MaxDeliver gives up on
// its last delivery with reason max_deliveries instead of vanishing.
func TestLastDeliveryGivesUp(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	prov := testProvision
	prov.MaxDeliver = 3
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1"}, testhooks.Agent{Provision: prov}), nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "maxdel", "items": [{"id": "x"}, {"id": "y"}],
		"agent_template": [{"handler": "flaky", "with": {"fail_rate": 1.0},
			"retry_config": {"attempts": 10, "backoff": "fixed", "initial_delay": "10ms"}}],
		"retry_budget": 100}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 2, st.DeadLettered, "%+v", st)
	// Each of deliveries 1 and 2 retries three times on its agent (local
	// retries spend no delivery), then naks; delivery 3 is the last.
	require.EqualValues(t, 2*2*(3+1), st.Retries, "deliveries 1 and 2 retry, delivery 3 is the last")
	require.Len(t, st.Errors, 1)
}

// An item whose agent dies on every delivery exhausts MaxDeliver with no
// outcome; the server's advisory brings it to the DLQ mover, which
// dead-letters it so the job still ends with counts that add up.
func TestCrashOnLastDeliveryReachesTheDLQ(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	prov := testProvision
	prov.MaxDeliver = 2
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov)})
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "crashy", "items": [{"id": "doomed"}], "agent_template": [{"handler": "hang"}]}`)
	for i := range 2 {
		started := make(chan struct{}, 1)
		victim := startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("victim-%d", i), Concurrency: 1}, testhooks.Agent{Provision: prov}),
			map[string]agent.HandlerFunc{"hang": func(ctx context.Context, _ *agent.Call) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d never reached an agent", i+1)
		}
		victim.kill(t)
	}
	// The fleet lives on: a healthy agent keeps pulling. The server may
	// hold the exhausted message on its redelivery queue (a delivery to a
	// dead agent's pull request is "not delivered" and queued again) and
	// emits the advisory only when it next tries to deliver, that is on a
	// pull (docs/jetstream.md §5). It must never run the item a third time.
	ran := make(chan struct{}, 1)
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "survivor"}, testhooks.Agent{Provision: prov}),
		map[string]agent.HandlerFunc{"hang": func(context.Context, *agent.Call) (any, error) {
			ran <- struct{}{}
			return nil, nil
		}})
	st := waitJob(t, cl, id, 60*time.Second)
	require.Empty(t, ran, "MaxDeliver 2: no third delivery")
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
	require.Equal(t, messages.StateFailed, st.State)

	names := messages.MustNames("")
	dlqStream, err := srv.JS().Stream(context.Background(), names.DLQStream())
	require.NoError(t, err)
	m, err := dlqStream.GetLastMsgForSubject(context.Background(), names.JobDLQFilter(id))
	require.NoError(t, err)
	var entry messages.DLQEntry
	require.NoError(t, json.Unmarshal(m.Data, &entry))
	require.Equal(t, messages.ReasonMaxDeliveries, entry.Reason)
	require.Equal(t, "doomed", entry.ItemID)
	require.JSONEq(t, `{"id": "doomed"}`, string(entry.Payload))

	work, err := srv.JS().Stream(context.Background(), names.WorkStream())
	require.NoError(t, err)
	info, err := work.Info(context.Background())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "the exhausted message was removed from the work stream")
}
