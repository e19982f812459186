package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// events records the events of one job, by name.
type events struct {
	mu  sync.Mutex
	all []messages.Event
}

func watchEvents(t *testing.T, srv *fleettest.Server, job string) *events {
	ev := &events{}
	sub, err := srv.Conn().Subscribe("fleet.events."+job+".>", func(m *nats.Msg) {
		var e messages.Event
		if json.Unmarshal(m.Data, &e) == nil {
			ev.mu.Lock()
			ev.all = append(ev.all, e)
			ev.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, srv.Conn().Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ev
}

func (e *events) named(name string) []messages.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []messages.Event
	for _, x := range e.all {
		if x.Type == name {
			out = append(out, x)
		}
	}
	return out
}

func (e *events) waitFor(t *testing.T, name string, n int) []messages.Event {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if len(e.named(name)) < n {
			return errNotYet
		}
		return nil
	})
	return e.named(name)
}

// checkHandler fails items whose "fail" field is true, permanently.
func checkHandler(_ context.Context, c *agent.Call) (any, error) {
	var it struct {
		ID   int  `json:"id"`
		Fail bool `json:"fail"`
	}
	if err := c.Decode(&it); err != nil {
		return nil, retry.Permanent(err)
	}
	if it.Fail {
		return nil, retry.Permanent(fmt.Errorf("item %d is bad", it.ID))
	}
	return fmt.Sprintf("ok-%d", it.ID), nil
}

var checkHandlers = map[string]agent.HandlerFunc{"check": checkHandler}

func TestMaxFailuresStopsTheJobAtExactlyN(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1}, checkHandlers)
	cl := client(t, srv)
	ev := watchEvents(t, srv, "maxfail")
	// Every third item fails; the job must stop at the third failure.
	items := itemsJSON(30, func(i int) map[string]any { return map[string]any{"id": i, "fail": i%3 == 2} })
	id := submit(t, cl, `{"id": "maxfail", "max_parallel": 1, "items": `+items+`,
		"agent_template": [{"handler": "check"}],
		"error_policy": {"max_failures": 3}}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateStopped, st.State)
	require.Equal(t, messages.CompletionMaxFailures, st.CompletionReason)
	require.EqualValues(t, 3, st.DeadLettered, "the tripping item is dead-lettered too")
	require.EqualValues(t, 6, st.Succeeded, "items 0..8 ran: 6 good, 3 bad")
	require.EqualValues(t, 21, st.NotRun)
	stopped := ev.waitFor(t, "JobStopped", 1)
	var data map[string]any
	require.NoError(t, json.Unmarshal(stopped[0].Data, &data))
	require.EqualValues(t, 3, data["dead_lettered"])
	require.EqualValues(t, messages.CompletionMaxFailures, data["reason"])
	ev.waitFor(t, "MapPhaseEnded", 1)
}

// gatedCheck is checkHandler for items below open; an item from open on
// waits until release is closed (or its context ends), so the items
// before it decide the job's end and the rest cannot finish first.
func gatedCheck(open int, release <-chan struct{}) agent.HandlerFunc {
	return func(ctx context.Context, c *agent.Call) (any, error) {
		var it struct {
			ID int `json:"id"`
		}
		if err := c.Decode(&it); err == nil && it.ID >= open {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return checkHandler(ctx, c)
	}
}

func TestFailureThresholdStopsAfterTenItems(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	// Items 0..19 run freely: 6 of them fail (30%), so the threshold trips
	// among them whatever order their results arrive in. Items from 20 on
	// wait until the job has ended: the rest of the job cannot outrun the
	// stop, as it could when every item ran at once.
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	handlers := map[string]agent.HandlerFunc{"check": gatedCheck(20, release)}
	for i := range 2 {
		startAgent(t, srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 4}, handlers)
	}
	t.Cleanup(open) // before the agents stop
	cl := client(t, srv)
	ev := watchEvents(t, srv, "threshold")
	// 30% of the items fail, against a threshold of 25%.
	items := itemsJSON(200, func(i int) map[string]any { return map[string]any{"id": i, "fail": i%10 < 3} })
	id := submit(t, cl, `{"id": "threshold", "items": `+items+`,
		"agent_template": [{"handler": "check"}],
		"error_policy": {"failure_threshold": 0.25}}`)
	st := waitJob(t, cl, id, 60*time.Second)
	open()
	require.Equal(t, messages.StateStopped, st.State)
	require.Equal(t, messages.CompletionFailureThreshold, st.CompletionReason)
	stopped := ev.waitFor(t, "JobStopped", 1)
	var at struct {
		Succeeded, Failed, DeadLettered, Skipped, NotRun int64
	}
	raw := strings.NewReplacer(`"dead_lettered"`, `"deadlettered"`, `"not_run"`, `"notrun"`).Replace(string(stopped[0].Data))
	require.NoError(t, json.Unmarshal([]byte(raw), &at))
	finished := at.Succeeded + at.Failed + at.DeadLettered + at.Skipped
	require.GreaterOrEqual(t, finished, int64(retry.MinFinishedForThreshold), "no stop before 10 finished items: %+v", at)
	require.Greater(t, float64(at.DeadLettered)/float64(finished), 0.25, "stopped only over the threshold: %+v", at)
	require.Positive(t, st.NotRun, "the rest of the job did not run")
}

func TestContinueOnFailureFalseStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1}, checkHandlers)
	cl := client(t, srv)
	items := itemsJSON(10, func(i int) map[string]any { return map[string]any{"id": i, "fail": i == 4} })
	id := submit(t, cl, `{"id": "first", "max_parallel": 1, "items": `+items+`,
		"agent_template": [{"handler": "check"}], "error_policy": {"continue_on_failure": false}}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateStopped, st.State)
	require.Equal(t, messages.CompletionFirstFailure, st.CompletionReason)
	require.EqualValues(t, 4, st.Succeeded)
	require.EqualValues(t, 1, st.DeadLettered)
	require.EqualValues(t, 5, st.NotRun)
}

func TestOnItemFailureStopSkipAndCustom(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var customCalls atomic.Int64
	var customCause atomic.Value
	handlers := map[string]agent.HandlerFunc{
		"check": checkHandler,
		"notify": func(_ context.Context, c *agent.Call) (any, error) {
			customCalls.Add(1)
			if c.Cause != nil {
				customCause.Store(c.Cause.Error())
			}
			return nil, nil
		},
	}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1}, handlers)
	cl := client(t, srv)
	items := itemsJSON(10, func(i int) map[string]any { return map[string]any{"id": i, "fail": i == 3 || i == 6} })

	t.Run("stop", func(t *testing.T) {
		id := submit(t, cl, `{"id": "ifstop", "max_parallel": 1, "items": `+items+`,
			"agent_template": [{"handler": "check"}], "error_policy": {"on_item_failure": "stop"}}`)
		st := waitJob(t, cl, id, 60*time.Second)
		require.Equal(t, messages.StateStopped, st.State)
		require.Equal(t, messages.CompletionItemStop, st.CompletionReason)
		require.EqualValues(t, 3, st.Succeeded)
		require.EqualValues(t, 1, st.DeadLettered)
		require.EqualValues(t, 6, st.NotRun)
	})
	t.Run("skip", func(t *testing.T) {
		id := submit(t, cl, `{"id": "ifskip", "items": `+items+`,
			"agent_template": [{"handler": "check"}], "error_policy": {"on_item_failure": "skip"}}`)
		st := waitJob(t, cl, id, 60*time.Second)
		require.Equal(t, messages.StateSucceeded, st.State, "skipped items do not fail the job")
		require.EqualValues(t, 8, st.Succeeded)
		require.EqualValues(t, 2, st.Skipped)
		require.Zero(t, st.DeadLettered)
	})
	t.Run("custom", func(t *testing.T) {
		id := submit(t, cl, `{"id": "ifcustom", "items": `+items+`,
			"agent_template": [{"handler": "check"}], "error_policy": {"on_item_failure": {"custom": {"handler": "notify"}}}}`)
		st := waitJob(t, cl, id, 60*time.Second)
		require.Equal(t, messages.StateFailed, st.State)
		require.EqualValues(t, 8, st.Succeeded)
		require.EqualValues(t, 2, st.Failed, "handled by the custom step: failed, not dead-lettered")
		require.Zero(t, st.DeadLettered)
		require.EqualValues(t, 2, customCalls.Load())
		require.Contains(t, customCause.Load(), "is bad")
	})
	t.Run("custom shell", func(t *testing.T) {
		dir := t.TempDir()
		id := submit(t, cl, `{"id": "ifcustomsh", "items": `+items+`,
			"agent_template": [{"handler": "check"}],
			"error_policy": {"on_item_failure": {"custom": {"shell": "printf '%s|%s' \"$FAILURE_REASON\" \"$FAILURE_ERROR\" > `+dir+`/${item_id}"}}}}`)
		st := waitJob(t, cl, id, 60*time.Second)
		require.EqualValues(t, 2, st.Failed)
		require.Zero(t, st.DeadLettered)
		for _, item := range []string{"3", "6"} {
			got, err := os.ReadFile(filepath.Join(dir, item))
			require.NoError(t, err)
			require.Contains(t, string(got), messages.ReasonPermanent+"|")
			require.Contains(t, string(got), "item "+item+" is bad")
		}
	})
}

func TestOnItemFailureRetryRunsTheWholeItemAgain(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	var mu sync.Mutex
	runs := map[string][]int{} // item -> steps run, in order
	record := func(c *agent.Call) {
		mu.Lock()
		runs[c.ItemID] = append(runs[c.ItemID], c.Step)
		mu.Unlock()
	}
	failFirstRuns := func(_ context.Context, c *agent.Call) (any, error) {
		record(c)
		mu.Lock()
		n := 0
		for _, s := range runs[c.ItemID] {
			if s == 1 {
				n++
			}
		}
		mu.Unlock()
		var it struct{ Always bool }
		_ = c.Decode(&it)
		if it.Always || n <= 2 {
			return nil, errors.New("downstream rejected the batch")
		}
		return "done", nil
	}
	handlers := map[string]agent.HandlerFunc{
		"prepare": func(_ context.Context, c *agent.Call) (any, error) { record(c); return "prepared", nil },
		"commit":  failFirstRuns,
	}
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, handlers)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "itemretry", "items": [{"id": "x"}, {"id": "y", "always": true}],
		"agent_template": [{"handler": "prepare"}, {"handler": "commit", "retry_config": {"attempts": 1}}],
		"error_policy": {"on_item_failure": "retry", "retry_config": {"max_attempts": 3, "backoff": "fixed", "initial_delay": "20ms"}},
		"retry_budget": 10}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded)
	require.EqualValues(t, 1, st.DeadLettered)
	require.EqualValues(t, 4, st.Retries, "two whole-item retries per item, each claiming the budget")
	require.Equal(t, 4, st.Budget.Consumed)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{0, 1, 0, 1, 0, 1}, runs["x"], "every run starts again at the first step")
	require.Equal(t, []int{0, 1, 0, 1, 0, 1}, runs["y"])
	dl := readDLQ(t, srv, id)
	require.Len(t, dl, 1)
	require.Equal(t, messages.ReasonItemRetryExhausted, dl[0].Reason)
	require.Contains(t, dl[0].Error, "downstream rejected")
}

func jetstreamSubjectsFilter(subject string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(subject)
}

// readDLQ returns the job's dead-letter entries.
func readDLQ(t *testing.T, srv *fleettest.Server, job string) []messages.DLQEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Agents write dead letters into their pool's stream, which the DLQ
	// stream sources a moment later: wait until it holds every one of the
	// job's (docs/dlq.md).
	pooled := 0
	names := srv.JS().StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, "FLEET_DLQ_") {
			continue
		}
		ps, err := srv.JS().Stream(ctx, name)
		require.NoError(t, err)
		info, err := ps.Info(ctx, jetstream.WithSubjectFilter("fleet.dlqin.*."+job))
		require.NoError(t, err)
		for _, n := range info.State.Subjects {
			pooled += int(n)
		}
	}
	var out []messages.DLQEntry
	fleettest.WaitFor(t, 10*time.Second, func() error {
		s, err := srv.JS().Stream(ctx, "FLEET_DLQ")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		out = nil
		sourced := 0
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil || !strings.HasPrefix(m.Subject, "fleet.dlq.") || !strings.HasSuffix(m.Subject, "."+job) {
				continue
			}
			var e messages.DLQEntry
			if err := json.Unmarshal(m.Data, &e); err != nil {
				return err
			}
			out = append(out, e)
			if !strings.HasPrefix(m.Subject, "fleet.dlq."+messages.CoordinatorOrigin+".") {
				sourced++
			}
		}
		if sourced < pooled {
			return fmt.Errorf("the DLQ stream holds %d of the %d dead letters of %s in the pools' streams", sourced, pooled, job)
		}
		return nil
	})
	return out
}

func TestErrorCollectionEvents(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, checkHandlers)
	cl := client(t, srv)
	items := itemsJSON(20, func(i int) map[string]any { return map[string]any{"id": i, "fail": i%3 == 0} }) // 7 failures

	evImm := watchEvents(t, srv, "collimm")
	id := submit(t, cl, `{"id": "collimm", "items": `+items+`, "agent_template": [{"handler": "check"}],
		"error_policy": {"error_collection": "immediate"}}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 7, st.DeadLettered)
	require.Len(t, evImm.waitFor(t, "ItemFailed", 7), 7)

	evBat := watchEvents(t, srv, "collbat")
	id = submit(t, cl, `{"id": "collbat", "items": `+items+`, "agent_template": [{"handler": "check"}],
		"error_policy": {"error_collection": {"batched": {"size": 3}}}}`)
	waitJob(t, cl, id, 60*time.Second)
	evBat.waitFor(t, "JobCompleted", 1)
	batches := evBat.waitFor(t, "ErrorBatch", 3)
	sizes := 0
	for _, b := range batches {
		var d struct{ Count int }
		require.NoError(t, json.Unmarshal(b.Data, &d))
		sizes += d.Count
	}
	require.Equal(t, 7, sizes, "3 + 3 + the last 1 flushed at the end")
	require.Len(t, batches, 3)
	require.Empty(t, evBat.named("ItemFailed"))

	// aggregate: the final report groups the errors by signature.
	st, err := cl.JobStatus(context.Background(), "collbat")
	require.NoError(t, err)
	var total int64
	for _, e := range st.Errors {
		total += e.Count
	}
	require.EqualValues(t, 7, total)
}

// groupPools creates the consumers of pools a, b and c so that group_by
// routes each group's items to the pool of its name.
func groupPools(t *testing.T, srv *fleettest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names, _ := messages.NewNames("fleet")
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, testProvision))
	for _, p := range []string{"a", "b", "c"} {
		_, err := provision.EnsurePool(ctx, srv.JS(), names, p, testProvision)
		require.NoError(t, err)
	}
}

func groupedItems(perGroup int) string { return groupedItemsC(perGroup, perGroup) }

// groupedItemsC has perGroup items in groups a and b, and inC in group c.
func groupedItemsC(perGroup, inC int) string {
	items := make([]map[string]any, 0, 2*perGroup+inC)
	for i := range perGroup {
		items = append(items, map[string]any{"id": "a" + fmt.Sprint(i), "region": "a"}, map[string]any{"id": "b" + fmt.Sprint(i), "region": "b"})
	}
	for i := range inC {
		items = append(items, map[string]any{"id": "c" + fmt.Sprint(i), "region": "c"})
	}
	b, _ := json.Marshal(items)
	return string(b)
}

func TestBestEffortMinGroupsReached(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	groupPools(t, srv)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a", Pool: "a", Concurrency: 4}, nil)
	startAgent(t, srv.URL(), agent.Config{Name: "b", Pool: "b", Concurrency: 4}, nil)
	// Nobody runs pool c.
	cl := client(t, srv)
	ev := watchEvents(t, srv, "be2")
	id := submit(t, cl, `{"id": "be2", "group_by": "${item.region}", "items": `+groupedItems(10)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"min_groups": 2}}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
	require.EqualValues(t, 20, st.Succeeded)
	require.EqualValues(t, 10, st.NotRun, "group c's queued items were removed")
	require.Equal(t, messages.GroupStatus{Items: 10, Done: 10, Succeeded: 10}, st.Groups["a"])
	require.EqualValues(t, 0, st.Groups["c"].Done)
	require.NotNil(t, st.BestEffort)
	require.Equal(t, 2, st.BestEffort.GroupsCompleted)
	require.True(t, st.BestEffort.Success)
	be := ev.waitFor(t, "BestEffortCompletion", 1)
	require.Contains(t, string(be[0].Data), `"reason":"min_groups_reached"`)

	// The queue of pool c holds nothing of the job any more.
	names, _ := messages.NewNames("fleet")
	s, err := srv.JS().Stream(context.Background(), names.WorkStream())
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstreamSubjectsFilter(names.WorkSubject("c", id)))
	require.NoError(t, err)
	require.Zero(t, len(info.State.Subjects))
}

func TestBestEffortDeadlineExpiredAndClamp(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	groupPools(t, srv)
	clk := clock.NewManual(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	coord := startCoordinator(t, srv.URL(), testhooks.WithCoordinator(coordinator.Config{}, testhooks.Coordinator{Clock: clk}))
	startAgent(t, srv.URL(), agent.Config{Name: "a", Pool: "a", Concurrency: 4}, nil)
	startAgent(t, srv.URL(), agent.Config{Name: "b", Pool: "b", Concurrency: 4}, nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "be3", "group_by": "${item.region}", "items": `+groupedItems(5)+`,
		"agent_template": [{"handler": "noop"}], "best_effort": {"min_groups": 7, "deadline": "5m"}}`)
	waitDone(t, cl, id, 10)
	st, err := cl.JobStatus(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, st.State, "min_groups 3 (clamped from 7) is not reached")
	require.Equal(t, 3, st.BestEffort.MinGroups)
	require.Equal(t, 7, st.BestEffort.RequestedMinGroups)
	require.Contains(t, st.BestEffort.Clamped, "lowered")

	// A coordinator restart neither extends nor loses the deadline.
	coord.stop(t)
	clk.Advance(4 * time.Minute)
	startCoordinator(t, srv.URL(), testhooks.WithCoordinator(coordinator.Config{}, testhooks.Coordinator{Clock: clk}))
	st, err = cl.JobStatus(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, st.State)
	clk.Advance(time.Minute)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.CompletionDeadline, st.CompletionReason)
	require.Equal(t, messages.StateFailed, st.State, "only 2 of 3 required groups completed")
	require.False(t, st.BestEffort.Success)
	require.EqualValues(t, 10, st.Succeeded)
	require.EqualValues(t, 5, st.NotRun)
}

func TestBestEffortLateResults(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{messages.LateResultsLog, messages.LateResultsUpdate} {
		t.Run(policy, func(t *testing.T) {
			srv := fleettest.RunServer(t)
			groupPools(t, srv)
			startCoordinator(t, srv.URL(), coordinator.Config{})
			started := make(chan string, 10)
			cRuns := make(chan struct{})
			release := make(chan struct{})
			slow := func(ctx context.Context, c *agent.Call) (any, error) {
				started <- c.ItemID
				close(cRuns)
				select {
				case <-release:
					return "late", nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			// Groups a and b finish only once c's item runs: else they could
			// complete the job, and purge c's queue, before it starts.
			afterC := func(ctx context.Context, _ *agent.Call) (any, error) {
				select {
				case <-cRuns:
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			startAgent(t, srv.URL(), agent.Config{Name: "a", Pool: "a", Concurrency: 4}, map[string]agent.HandlerFunc{"noop": afterC})
			startAgent(t, srv.URL(), agent.Config{Name: "b", Pool: "b", Concurrency: 4}, map[string]agent.HandlerFunc{"noop": afterC})
			// Pool c holds its one item until released: it is running when
			// groups a and b complete the job.
			startAgent(t, srv.URL(), agent.Config{Name: "c", Pool: "c", Concurrency: 1, Prefetch: 1},
				map[string]agent.HandlerFunc{"noop": slow})
			cl := client(t, srv)
			job := "late-" + policy
			ev := watchEvents(t, srv, job)
			id := submit(t, cl, `{"id": "`+job+`", "group_by": "${item.region}", "items": `+groupedItemsC(5, 1)+`,
				"agent_template": [{"handler": "noop"}],
				"best_effort": {"min_groups": 2, "late_results": "`+policy+`"}}`)
			<-started
			st := waitJob(t, cl, id, 60*time.Second)
			require.Equal(t, messages.CompletionMinGroups, st.CompletionReason)
			require.EqualValues(t, 1, st.NotRun)
			close(release) // the item that was running reports now
			ev.waitFor(t, "LateResult", 1)
			fleettest.WaitFor(t, 10*time.Second, func() error {
				st, _ = cl.JobStatus(context.Background(), id)
				if st.LateResults < 1 {
					return errNotYet
				}
				return nil
			})
			require.EqualValues(t, 1, st.LateResults)
			if policy == messages.LateResultsLog {
				require.EqualValues(t, 10, st.Succeeded, "logged, not aggregated")
				require.EqualValues(t, 1, st.NotRun)
			} else {
				fleettest.WaitFor(t, 10*time.Second, func() error {
					st, _ = cl.JobStatus(context.Background(), id)
					if st.Succeeded != 11 {
						return errNotYet
					}
					return nil
				})
				require.Zero(t, st.NotRun, "amended")
				ev.waitFor(t, "JobResultAmended", 1)
			}
			require.Equal(t, st.Items, st.Succeeded+st.DeadLettered+st.Skipped+st.NotRun+st.Failed)
		})
	}
}

func TestReduceSeesTheMapResults(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	out := t.TempDir()
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 4}, checkHandlers)
	cl := client(t, srv)
	items := itemsJSON(10, func(i int) map[string]any { return map[string]any{"id": i, "fail": i == 2 || i == 7} })
	id := submit(t, cl, `{"id": "mr", "items": `+items+`, "agent_template": [{"handler": "check"}],
		"reduce": [{"shell": "cp ${map.results} `+out+`/results.json && echo ${map.successful} ${map.failed} > `+out+`/counts && echo reduced"}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.NotNil(t, st.Reduce)
	require.Equal(t, messages.OutcomeSucceeded, st.Reduce.State, "%+v", st.Reduce)
	require.Contains(t, st.Reduce.Output, "reduced")
	require.Equal(t, messages.StateFailed, st.State, "two items were dead-lettered")
	require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason)
	counts, err := os.ReadFile(filepath.Join(out, "counts"))
	require.NoError(t, err)
	require.Equal(t, "8 2\n", string(counts))
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res []messages.MapOutput
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Len(t, res, 10)
	for i, r := range res {
		require.EqualValues(t, i, r.Index)
		if i == 2 || i == 7 {
			require.Equal(t, messages.OutcomeDeadLettered, r.Outcome)
			require.Contains(t, r.Error, "is bad")
		} else {
			require.Equal(t, messages.OutcomeSucceeded, r.Outcome)
			require.Equal(t, fmt.Sprintf("ok-%d", i), r.Output)
		}
	}
}

func TestReduceFailureFailsTheJobAndCancelSkipsIt(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 2}, nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "rf", "items": [1, 2, 3], "agent_template": [{"handler": "noop"}],
		"reduce": [{"shell": "echo no >&2; exit 3", "retry_config": {"attempts": 1}}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 3, st.Succeeded)
	require.Equal(t, messages.OutcomeFailed, st.Reduce.State)
	require.Contains(t, st.Reduce.Error, "exit")

	// A cancelled job runs no reduce.
	marker := filepath.Join(t.TempDir(), "reduced")
	id = submit(t, cl, `{"id": "rc", "items": [1, 2], "agent_template": [{"handler": "sleep", "with": {"duration": "60s"}}],
		"reduce": [{"shell": "touch `+marker+`"}]}`)
	waitRunning(t, cl, id)
	_, err := cl.JobCancel(context.Background(), id)
	require.NoError(t, err)
	st = waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.StateCancelled, st.State)
	require.Nil(t, st.Reduce)
	_, err = os.Stat(marker)
	require.True(t, os.IsNotExist(err))
}

func waitRunning(t *testing.T, cl *jfclient.Client, id string) {
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.JobStatus(context.Background(), id)
		if err != nil {
			return err
		}
		if st.State != messages.StateRunning || st.Published == 0 {
			return errNotYet
		}
		return nil
	})
}

// A job whose groups run in two pools splits its retry budget between
// them by items (retry_budget 4, 4 items each: 2 and 2): each pool's agents
// spend only their share, so each pool retries exactly two of its items,
// which fail once, and dead-letters the other two.
func TestBudgetSplitBetweenPools(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	groupPools(t, srv)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a", Pool: "a", Concurrency: 4}, nil)
	startAgent(t, srv.URL(), agent.Config{Name: "b", Pool: "b", Concurrency: 4}, nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "split", "pool": "a", "group_by": "${item.region}", "items": `+groupedItemsC(4, 0)+`,
		"retry_budget": 4,
		"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
			"retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms", "jitter": false}}]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 4, st.Succeeded, "%+v", st)
	require.EqualValues(t, 4, st.DeadLettered, "%+v", st)
	require.Equal(t, 4, st.Budget.Consumed, "%+v", st.Budget)
	require.Equal(t, 4, st.Budget.Total, "%+v", st.Budget)
	for _, g := range []string{"a", "b"} {
		require.EqualValues(t, 2, st.Groups[g].Succeeded, "group %s: %+v", g, st.Groups[g])
	}
}
