package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Items parked on a long backoff must not freeze their pool. A job whose
// every item fails onto a one-hour backoff, then a 500-item no-op job in
// the same pool, which must finish in under 10 s (the bound parking was
// built for; on this kind of machine the job takes about a second, and
// without parking it would wait for the backoff: docs/retries.md
// "Parking"). The backoff is far longer than the test, so no parked item
// comes back while the second job runs however slowly the first one was
// parked (with 60 s, a loaded machine that took longer than that to park
// 30,000 items made the second job wait behind the returning ones).
// Everything else is waited for by polling, not timed.
func TestParkedRetriesLeaveThePoolFree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		maxAckPending int // 0: the default, 20,000
		parked        int
	}{
		{"max-ack-pending 2000, 3000 parked", 2000, 3000},
		{"default flags, 30000 parked", 0, 30000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.parked > 3000 {
				// Measured: parking 30,000 items takes 9 s here, over
				// 3 minutes under -race on 2 cores.
				skipScale(t, "30,000 parked items")
			}
			srv := fleettest.RunServer(t)
			prov := calmProvision
			prov.MaxAckPending = tc.maxAckPending
			startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov)})
			for i := range 2 { // two agents with their default settings, as deployed
				startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i)}, testhooks.Agent{Provision: prov}),
					map[string]agent.HandlerFunc{"call": fails})
			}
			cl := client(t, srv)

			failing := submit(t, cl, fmt.Sprintf(`{"id": "failing", "items": %s, "retry_budget": %d,
				"agent_template": [{"handler": "call", "retry_config": {"attempts": 3, "backoff": "fixed",
				"initial_delay": "1h", "max_delay": "1h", "jitter": false}}]}`,
				itemsJSON(tc.parked, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("f%d", i)} }), 3*tc.parked))
			// Every item has failed once and waits out its hour in the
			// park stream: one budget unit each, and none of the job's
			// messages left in the work stream.
			tp := time.Now()
			waitParked(t, cl, failing, tc.parked)
			t.Logf("%d items parked in %v; %d of the job's messages in the work stream", tc.parked, time.Since(tp), jobQueued(t, srv, failing))
			if tc.maxAckPending > 0 {
				require.Greater(t, tc.parked, tc.maxAckPending, "more parked items than MaxAckPending slots")
			}

			t0 := time.Now()
			quick := submit(t, cl, `{"id": "quick", "items": `+itemsJSON(500, plainItem)+`, "agent_template": [{"handler": "noop"}]}`)
			st := waitJob(t, cl, quick, 60*time.Second)
			took := time.Since(t0)
			require.EqualValues(t, 500, st.Succeeded)
			t.Logf("500 no-op items beside %d parked ones: %v", tc.parked, took)
			require.Less(t, took, 10*time.Second, "the bound parking is for")

			_, err := cl.JobCancel(context.Background(), failing)
			require.NoError(t, err)
			waitParkEmpty(t, srv)
		})
	}
}

// The same for a job whose circuit breaker stays open: its deliveries,
// refused by the breaker for an hour, wait in the park stream and hold no
// ack-pending slot, so a 500-item job in the same pool finishes in under
// 10 s. The coordinator's fair share is lifted (--job-queue -1): with it,
// one job holds at most 1,000 slots, and the window (2,000) would not fill
// unless several jobs had open breakers at once. Were these 3,000
// deliveries delayed naks, they would hold every slot and the second job
// would wait the hour.
func TestBreakerParkedItemsLeaveThePoolFree(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	prov := calmProvision
	prov.MaxAckPending = 2000
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov), JobQueue: -1})
	var regs []*prometheus.Registry
	var calls atomic.Int64
	call := func(ctx context.Context, c *agent.Call) (any, error) {
		calls.Add(1)
		return fails(ctx, c)
	}
	for i := range 2 {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i), Registerer: reg}, testhooks.Agent{Provision: prov}),
			map[string]agent.HandlerFunc{"call": call})
	}
	cl := client(t, srv)

	const n = 3000
	down := submit(t, cl, fmt.Sprintf(`{"id": "down", "items": %s,
		"error_policy": {"circuit_breaker": {"failure_threshold": 1, "success_threshold": 1, "timeout": "1h", "half_open_requests": 1}},
		"agent_template": [{"handler": "call", "retry_config": {"attempts": 3, "backoff": "fixed",
			"initial_delay": "1h", "max_delay": "1h", "jitter": false}}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("d%d", i)} })))
	// The first failures open the breaker; every other item is refused
	// (or, for the few that ran, retried after an hour): every item has been
	// delivered once and waits.
	fleettest.WaitFor(t, 5*time.Minute, func() error {
		refused := sumCounter(t, regs, "jetfleet_agent_breaker_parked_total")
		if ran := calls.Load(); int64(refused)+ran < n {
			return fmt.Errorf("%.0f deliveries refused by the breaker, %d ran", refused, ran)
		}
		return nil
	})
	st, err := cl.JobStatus(context.Background(), down)
	require.NoError(t, err)
	require.Zero(t, st.Done(), "nothing finished: every item waits")
	require.Less(t, calls.Load(), int64(100), "the open breaker refused the rest")

	t0 := time.Now()
	quick := submit(t, cl, `{"id": "quick", "items": `+itemsJSON(500, plainItem)+`, "agent_template": [{"handler": "noop"}]}`)
	st = waitJob(t, cl, quick, 60*time.Second)
	took := time.Since(t0)
	require.EqualValues(t, 500, st.Succeeded)
	t.Logf("500 no-op items beside %d parked by an open breaker: %v", n, took)
	require.Less(t, took, 10*time.Second, "the bound parking is for")
	// They wait in the park stream, not in the work stream.
	require.Zero(t, jobQueued(t, srv, down))
	require.EqualValues(t, n, parkState(t, srv).Msgs)

	_, err = cl.JobCancel(context.Background(), down)
	require.NoError(t, err)
	waitParkEmpty(t, srv)
}

// waitParked waits until every item of job has been parked once: the
// budget spent one unit per item.
func waitParked(t *testing.T, cl *jfclient.Client, job string, n int) {
	t.Helper()
	fleettest.WaitFor(t, 5*time.Minute, func() error {
		st, err := cl.JobStatus(context.Background(), job)
		if err != nil {
			return err
		}
		if st.Budget.Consumed < n {
			return fmt.Errorf("%d of %d items parked", st.Budget.Consumed, n)
		}
		return nil
	})
}

// jobQueued counts job's messages in the work stream.
func jobQueued(t *testing.T, srv *fleettest.Server, job string) uint64 {
	t.Helper()
	names, err := messages.NewNames("")
	require.NoError(t, err)
	s, err := srv.JS().Stream(context.Background(), names.WorkStream())
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(names.WorkSubject("*", job)))
	require.NoError(t, err)
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// A 100-item job submitted beside a 1,000,000-item job finishes in under
// 10 s (the big job need not finish and is cancelled). The coordinator keeps at most --job-queue
// (1000) of a job's messages in the work stream, so the small job starts
// behind at most that many no-op items.
func TestSmallJobBesideAMillionItems(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("counts a 1,000,000-item input")
	}
	dir := t.TempDir()
	writeItems(t, filepath.Join(dir, "big.json"), 1_000_000)
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), InputDir: dir})
	for i := range 2 {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i)}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	cl := client(t, srv)
	big := submit(t, cl, `{"id": "big", "input": "big.json", "agent_template": [{"handler": "noop"}]}`)
	// Accepting the job counts its 1,000,000 items (about 15 s under
	// -race); then it runs at full speed.
	fleettest.WaitFor(t, 3*time.Minute, func() error {
		st, err := cl.JobStatus(context.Background(), big)
		if err != nil {
			return err
		}
		if st.Done() < 2000 {
			return errNotYet
		}
		return nil
	})

	t0 := time.Now()
	small := submit(t, cl, `{"id": "small", "items": `+itemsJSON(100, plainItem)+`, "agent_template": [{"handler": "noop"}]}`)
	st := waitJob(t, cl, small, 60*time.Second)
	took := time.Since(t0)
	require.EqualValues(t, 100, st.Succeeded)
	t.Logf("100 items beside a 1,000,000-item job: %v", took)
	require.Less(t, took, 10*time.Second, "the bound parking is for")
	// The share bounds items without an outcome: one whose result is in
	// leaves the stream when the agent's ack arrives, once its results
	// batch is stored: up to a batch per agent later.
	require.LessOrEqual(t, jobQueued(t, srv, big), uint64(coordinator.DefaultJobQueue+2*agent.DefaultResultBatch), "the big job's fair share")

	_, err := cl.JobCancel(context.Background(), big)
	require.NoError(t, err)
	waitJob(t, cl, big, 60*time.Second)
}

// writeItems writes a JSON array of n small items.
func writeItems(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	_, _ = w.WriteString("[")
	for i := range n {
		if i > 0 {
			_ = w.WriteByte(',')
		}
		_, _ = fmt.Fprintf(w, `{"id":"b%d"}`, i)
	}
	_, _ = w.WriteString("]")
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
}

// runs counts each item's runs; failsFirst fails an item's first run
// onto the step's retry (a connection error) and lets later ones succeed.
type runs struct{ m sync.Map }

func (r *runs) of(item string) int64 {
	v, _ := r.m.LoadOrStore(item, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (r *runs) failsFirst(_ context.Context, c *agent.Call) (any, error) {
	v, _ := r.m.LoadOrStore(c.ItemID, new(atomic.Int64))
	if v.(*atomic.Int64).Add(1) == 1 {
		return nil, errors.New("connection refused")
	}
	return "ok", nil
}

// parkOnce is a job whose items fail once onto a parked retry of delay.
func parkOnce(id string, n int, delay string) string {
	return fmt.Sprintf(`{"id": %q, "items": %s, "retry_budget": %d, "agent_template": [{"handler": "flaky",
		"retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": %q, "max_delay": %q, "jitter": false}}]}`,
		id, itemsJSON(n, plainItem), n, delay, delay)
}

// An agent that dies between the park's PubAck and its ack: the message it
// was parking comes back after AckWait, superseded by the parked copy, and
// is acked without running; the copy runs the retry. Each item runs twice
// (its failure and its retry) and is counted once.
func TestAgentKilledBetweenParkAndAck(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var r runs
	handlers := map[string]agent.HandlerFunc{"flaky": r.failsFirst}
	died := make(chan string, 1)
	victim := startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "victim", Concurrency: 1, ParkAfter: time.Second}, testhooks.Agent{
		AfterPark: func(_, item string) bool {
			select {
			case died <- item:
			default:
			}
			return false // "crash": no ack
		}}), handlers)
	cl := client(t, srv)
	// The copy is due after 5 s, the killed delivery back after AckWait
	// (2 s): it finds the park in the item's state before the copy runs.
	// (Had the copy run first and ended the job, the coordinator would
	// have purged the killed delivery with the job's queued messages.)
	id := submit(t, cl, parkOnce("parkkill", 1, "5s"))
	var item string
	select {
	case item = <-died:
	case <-time.After(30 * time.Second):
		t.Fatal("the item was never parked")
	}
	victim.kill(t)

	reg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), agent.Config{Name: "survivor", ParkAfter: time.Second, Registerer: reg}, handlers)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded)
	require.EqualValues(t, 1, st.Retries, "one retry, counted once")
	require.EqualValues(t, 1, counterWith(t, reg, "jetfleet_agent_parked_total", "kind", "superseded"), "the killed delivery was acked without running")
	require.EqualValues(t, 2, r.of(item), "the failure and the parked retry; the superseded delivery did not run")
	waitParkEmpty(t, srv)
	require.EqualValues(t, 2, parkState(t, srv).LastSeq, "one schedule and its fired copy: the survivor's schedule was a duplicate")
}

// Parked items survive a server restart: their schedules are in the park
// stream's store. Every item runs its failure and its retry, and is
// counted once.
func TestParkedItemsSurviveAServerRestart(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	var r runs
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", ParkAfter: time.Second}, testhooks.Agent{Provision: calmProvision}),
		map[string]agent.HandlerFunc{"flaky": r.failsFirst})
	cl := client(t, srv)
	const n = 50
	id := submit(t, cl, parkOnce("parkrestart", n, "3s"))
	waitParked(t, cl, id, n)
	// The budget counts a retry when it is claimed, before its park is
	// stored: wait for the stream to hold them all.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if m := parkState(t, srv).Msgs; m != n {
			return fmt.Errorf("%d of %d items wait in the park stream", m, n)
		}
		return nil
	})
	srv.Restart(t)
	st := waitJob(t, cl, id, 120*time.Second)
	require.EqualValues(t, n, st.Succeeded, "%+v", st)
	require.EqualValues(t, n, st.Retries)
	for i := range n {
		require.GreaterOrEqual(t, r.of(plainItem(i)["id"].(string)), int64(2), "item %d", i)
	}
	waitParkEmpty(t, srv)
}

// waitParkEmpty waits until the park stream holds nothing: no schedule
// and no fired copy.
func waitParkEmpty(t *testing.T, srv *fleettest.Server) {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if m := parkState(t, srv).Msgs; m > 0 {
			return fmt.Errorf("%d messages left in the park stream", m)
		}
		return nil
	})
}

// parkState is the default pool's park stream's state.
func parkState(t *testing.T, srv *fleettest.Server) jetstream.StreamState {
	t.Helper()
	names, err := messages.NewNames("")
	require.NoError(t, err)
	s, err := srv.JS().Stream(context.Background(), names.ParkStream(messages.DefaultPool))
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State
}

// TestMeasureDelayedNakFreeze runs the two cases above without parking and
// without the fair share (agents with --park-after -1, coordinator with
// --job-queue -1) and logs what a second job waited, with and without an
// explicit retry budget. It measures rather than asserts, and takes
// minutes: JETFLEET_MEASURE=1 go test ./internal/e2e -run TestMeasure -v.
// docs/retries.md "Parking" reports the numbers.
func TestMeasureDelayedNakFreeze(t *testing.T) {
	t.Parallel()
	if os.Getenv("JETFLEET_MEASURE") == "" {
		t.Skip("a measurement: set JETFLEET_MEASURE=1")
	}
	for _, tc := range []struct {
		maxAckPending, items int
		budget               string // "" = the default, max(20, 10% of items)
	}{
		{2000, 3000, ""}, {2000, 3000, `"retry_budget": 100000,`},
		{0, 30000, ""}, {0, 30000, `"retry_budget": 100000,`},
	} {
		t.Run(fmt.Sprintf("map=%d items=%d budget=%q", tc.maxAckPending, tc.items, tc.budget), func(t *testing.T) {
			srv := fleettest.RunServer(t)
			prov := calmProvision
			prov.MaxAckPending = tc.maxAckPending
			startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(prov), JobQueue: -1})
			for i := range 2 {
				startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i), ParkAfter: -1}, testhooks.Agent{Provision: prov}),
					map[string]agent.HandlerFunc{"call": fails})
			}
			cl := client(t, srv)
			failing := submit(t, cl, fmt.Sprintf(`{"id": "failing", "items": %s, %s
				"agent_template": [{"handler": "call", "retry_config": {"attempts": 3, "backoff": "fixed",
				"initial_delay": "20s", "max_delay": "20s", "jitter": false}}]}`,
				itemsJSON(tc.items, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("f%d", i)} }), tc.budget))
			fleettest.WaitFor(t, 5*time.Minute, func() error {
				st, err := cl.JobStatus(context.Background(), failing)
				if err != nil {
					return err
				}
				if st.Done()+int64(st.Budget.Consumed) < int64(min(tc.items, max(tc.maxAckPending, 20000))) {
					return errNotYet
				}
				return nil
			})
			st, err := cl.JobStatus(context.Background(), failing)
			require.NoError(t, err)
			t.Logf("first job: budget %d consumed of %d, %d dead-lettered, %d retries", st.Budget.Consumed, st.Budget.Total, st.DeadLettered, st.Retries)
			t0 := time.Now()
			quick := submit(t, cl, `{"id": "quick", "items": `+itemsJSON(500, plainItem)+`, "agent_template": [{"handler": "noop"}]}`)
			waitJob(t, cl, quick, 5*time.Minute)
			t.Logf("500 no-op items took %v", time.Since(t0))
		})
	}
}

// TestMeasureParkCost compares a parked retry with a delayed nak on the
// same server in the same run: the process's CPU time per retry (server,
// coordinator and agents are all in this process) and how late the retry
// runs after its 2 s delay. JETFLEET_MEASURE=1 go test ./internal/e2e -run
// TestMeasureParkCost -v; docs/retries.md "Parking" reports the numbers.
func TestMeasureParkCost(t *testing.T) {
	t.Parallel()
	if os.Getenv("JETFLEET_MEASURE") == "" {
		t.Skip("a measurement: set JETFLEET_MEASURE=1")
	}
	const n = 5000
	for _, mode := range []struct {
		name      string
		parkAfter time.Duration
	}{{"nak", -1}, {"park", time.Second}, {"nak", -1}, {"park", time.Second}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := fleettest.RunServer(t)
			startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), JobQueue: -1})
			var mu sync.Mutex
			first := map[string]time.Time{}
			var late []time.Duration
			h := func(_ context.Context, c *agent.Call) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				if t0, ok := first[c.ItemID]; ok {
					late = append(late, time.Since(t0)-2*time.Second)
					return nil, nil
				}
				first[c.ItemID] = time.Now()
				return nil, errors.New("connection refused")
			}
			for i := range 2 {
				startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i), ParkAfter: mode.parkAfter}, testhooks.Agent{Provision: calmProvision}),
					map[string]agent.HandlerFunc{"flaky": h})
			}
			cl := client(t, srv)
			cpu0 := cpuTime(t)
			id := submit(t, cl, parkOnce("cost", n, "2s"))
			st := waitJob(t, cl, id, 5*time.Minute)
			require.EqualValues(t, n, st.Succeeded)
			cpu := cpuTime(t) - cpu0
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(late)
			t.Logf("%s: %d items failing once onto a 2 s retry: %.0f µs CPU per item; retry late by p50 %v, p99 %v, max %v",
				mode.name, n, float64(cpu.Microseconds())/n, late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
		})
	}
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// An agent killed (its connection closed, nothing acked) while it parks
// items, at whatever point each one is: every item still ends exactly once,
// succeeded, and the park stream is left empty.
func TestAgentKilledWhileParking(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	var r runs
	handlers := map[string]agent.HandlerFunc{"flaky": r.failsFirst}
	victim := startAgent(t, srv.URL(), agent.Config{Name: "victim", Concurrency: 8, ParkAfter: time.Second}, handlers)
	cl := client(t, srv)
	const n = 200
	id := submit(t, cl, parkOnce("parkcrash", n, "2s"))
	fleettest.WaitFor(t, 30*time.Second, func() error {
		st, err := cl.JobStatus(context.Background(), id)
		if err != nil {
			return err
		}
		if st.Budget.Consumed < n/4 {
			return errNotYet
		}
		return nil
	})
	victim.kill(t) // mid-parking
	startAgent(t, srv.URL(), agent.Config{Name: "survivor", Concurrency: 8, ParkAfter: time.Second}, handlers)
	st := waitJob(t, cl, id, 120*time.Second)
	require.EqualValues(t, n, st.Succeeded, "%+v", st)
	for i := range n {
		require.GreaterOrEqual(t, r.of(plainItem(i)["id"].(string)), int64(2), "item %d: its failure and its retry", i)
	}
	waitParkEmpty(t, srv)
}
