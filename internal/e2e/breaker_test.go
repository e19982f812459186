package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var breakerNames = messages.MustNames(messages.DefaultPrefix)

// dependency is the downstream of a job's handler, switched down and up by
// the test. While up, a call made while the job's breaker is half-open is
// a probe: it waits for release.
type dependency struct {
	breakers jetstream.KeyValue
	job      string
	up       atomic.Bool
	failed   atomic.Int64 // runs that failed (down)
	probes   atomic.Int64 // runs while half-open (up)
	release  chan struct{}
}

func newDependency(t *testing.T, srv *fleettest.Server, job string) *dependency {
	kv, err := srv.JS().KeyValue(context.Background(), breakerNames.BreakerBucket())
	require.NoError(t, err)
	return &dependency{breakers: kv, job: job, release: make(chan struct{})}
}

func (d *dependency) handle(ctx context.Context, _ *agent.Call) (any, error) {
	if !d.up.Load() {
		d.failed.Add(1)
		return nil, errors.New("503 Service Unavailable")
	}
	if d.state(ctx).Is(retry.CircuitHalfOpen) {
		d.probes.Add(1)
		select {
		case <-d.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return "ok", nil
}

// state is the job's breaker state (one node: every read is current).
func (d *dependency) state(ctx context.Context) retry.BreakerState {
	var st retry.BreakerState
	if e, err := d.breakers.Get(ctx, messages.DefaultPool+"."+d.job); err == nil {
		_ = json.Unmarshal(e.Value(), &st)
	}
	return st
}

// transitions follows a job's CircuitBreakerStateChanged events as "from>to".
type transitions struct {
	mu   sync.Mutex
	list []string
}

func watchTransitions(t *testing.T, srv *fleettest.Server, job string) *transitions {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := srv.JS().OrderedConsumer(ctx, breakerNames.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.AgentEventSubject(breakerNames, "*", job, messages.EventBreaker)},
	})
	require.NoError(t, err)
	tr := &transitions{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev messages.Event
		var d struct{ From, To string }
		if json.Unmarshal(m.Data(), &ev) != nil || ev.Type != "CircuitBreakerStateChanged" || json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		tr.mu.Lock()
		tr.list = append(tr.list, d.From+">"+d.To)
		tr.mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return tr
}

func (tr *transitions) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.list...)
}

// wait waits for the first len(want) transitions and checks them.
func (tr *transitions) wait(t *testing.T, want ...string) {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if got := tr.get(); len(got) < len(want) {
			return fmt.Errorf("transitions so far %v, waiting for %v", got, want)
		}
		return nil
	})
	require.Equal(t, want, tr.get()[:len(want)])
}

// sumCounter adds a counter's values over the agents' registries.
func sumCounter(t *testing.T, regs []*prometheus.Registry, name string) float64 {
	t.Helper()
	total := 0.0
	for _, reg := range regs {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

func breakerJobSpec(id string, n int, cb string) string {
	return fmt.Sprintf(`{"id": %q, "items": %s,
		"agent_template": [{"handler": "dep",
			"retry_config": {"attempts": 10, "backoff": "fixed", "initial_delay": "20ms"}}],
		"retry_budget": 1000,
		"error_policy": {"circuit_breaker": %s}}`,
		id, itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("it-%02d", i)} }), cb)
}

// A downstream goes down: the breaker opens after 3 consecutive failures,
// the fleet parks the job's items without spending attempts or budget,
// after the timeout exactly 2 probes run while the other deliveries stay
// parked, and their successes close the breaker.
func TestBreakerOpensParksProbesAndCloses(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	const job, n = "breaker", 20
	dep := newDependency(t, srv, job)
	// The agents' clock moves only when the test says: the breaker opens at
	// its "now", half-opens when the test advances it past the timeout, and
	// its half-open window (after which held probes count as lost) never
	// ends while the probes are held, however slowly a loaded machine parks
	// the other deliveries. Park delays are still real NakWithDelay waits.
	clk := clock.NewManual(time.Now())
	var regs []*prometheus.Registry
	for i := range 2 {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 4, Registerer: reg}, testhooks.Agent{Clock: clk}),
			map[string]agent.HandlerFunc{"dep": dep.handle})
	}
	tr := watchTransitions(t, srv, job)
	cl := client(t, srv)
	submit(t, cl, breakerJobSpec(job, n,
		`{"failure_threshold": 3, "success_threshold": 2, "timeout": "1s", "half_open_requests": 2}`))

	// Down: it opens, and then the dependency comes back.
	tr.wait(t, "closed>open")
	dep.up.Store(true)
	// While open, items are parked and nothing more is spent: every unit
	// of the budget is a retry of a failed run.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if p := sumCounter(t, regs, "jetfleet_agent_breaker_parked_total"); p < 10 {
			return fmt.Errorf("%v parked", p)
		}
		st, err := cl.JobStatus(context.Background(), job)
		if err != nil {
			return err
		}
		if st.Breaker == nil || st.Breaker.State != retry.CircuitOpen {
			return fmt.Errorf("status shows breaker %+v", st.Breaker)
		}
		if int64(st.Budget.Consumed) != dep.failed.Load() {
			return fmt.Errorf("budget consumed %d, failed runs %d", st.Budget.Consumed, dep.failed.Load())
		}
		return nil
	})

	// Half-open: exactly two probes run; the other deliveries are parked.
	clk.Advance(time.Second)
	tr.wait(t, "closed>open", "open>half_open")
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if p := dep.probes.Load(); p < 2 {
			return fmt.Errorf("%d probes", p)
		}
		return nil
	})
	parked := sumCounter(t, regs, "jetfleet_agent_breaker_parked_total")
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if p := sumCounter(t, regs, "jetfleet_agent_breaker_parked_total"); p < parked+5 {
			return fmt.Errorf("%v parked while half-open", p-parked)
		}
		return nil
	})
	require.EqualValues(t, 2, dep.probes.Load(), "exactly half_open_requests probes ran")
	st := dep.state(context.Background())
	require.True(t, st.Is(retry.CircuitHalfOpen), "%+v", st)
	require.Equal(t, 2, st.Probes)
	close(dep.release)

	// Their successes close it, and every item succeeds.
	final := waitJob(t, cl, job, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, final.State)
	require.EqualValues(t, n, final.Succeeded)
	tr.wait(t, "closed>open", "open>half_open", "half_open>closed")
	require.Len(t, tr.get(), 3)
	require.NotNil(t, final.Breaker)
	require.Equal(t, retry.CircuitClosed, final.Breaker.State)
	failed := dep.failed.Load()
	require.Positive(t, failed)
	require.EqualValues(t, failed, final.Budget.Consumed, "parking spent no budget: one unit per failed run")
	require.EqualValues(t, failed, final.Retries)
	t.Logf("failed runs %d (= budget consumed), deliveries parked %v, probes %d",
		failed, sumCounter(t, regs, "jetfleet_agent_breaker_parked_total"), dep.probes.Load())
}

// A probe that fails re-opens the breaker for another timeout; the next
// half-open period's probe succeeds and closes it.
func TestBreakerProbeFailureReopens(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	const job, n = "reopen", 6
	dep := newDependency(t, srv, job)
	close(dep.release) // probes are not held
	startAgent(t, srv.URL(), agent.Config{Name: "a0", Concurrency: 4}, map[string]agent.HandlerFunc{"dep": dep.handle})
	tr := watchTransitions(t, srv, job)
	cl := client(t, srv)
	submit(t, cl, breakerJobSpec(job, n,
		`{"failure_threshold": 2, "success_threshold": 1, "timeout": "300ms", "half_open_requests": 1}`))

	tr.wait(t, "closed>open", "open>half_open", "half_open>open") // the probe failed: still down
	dep.up.Store(true)
	final := waitJob(t, cl, job, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, final.State)
	require.EqualValues(t, n, final.Succeeded)
	tr.wait(t, "closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed")
	require.Len(t, tr.get(), 5)
	require.Equal(t, retry.CircuitClosed, final.Breaker.State)
	require.EqualValues(t, dep.failed.Load(), final.Budget.Consumed)
}

// Bad items do not open a job's breaker: permanent and non-retryable
// errors are the item's fault, not the dependency's, and count as neither
// failures nor successes. Transient failures of the same job still open it.
func TestBreakerIgnoresTheItemsOwnFaults(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	reg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 1, Registerer: reg}, map[string]agent.HandlerFunc{
		"bad": func(context.Context, *agent.Call) (any, error) {
			return nil, retry.Permanent(errors.New("400 bad request: no such field"))
		},
	})
	cl := client(t, srv)
	breaker := `"error_policy": {"circuit_breaker": {"failure_threshold": 3, "success_threshold": 1, "timeout": "1m", "half_open_requests": 1}}`
	id := submit(t, cl, fmt.Sprintf(`{"id": "bad-items", "items": %s, %s,
		"agent_template": [{"handler": "bad"}, {"shell": "true"}]}`, itemsJSON(10, plainItem), breaker))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 10, st.DeadLettered)
	require.NotNil(t, st.Breaker)
	require.Equal(t, retry.CircuitClosed, st.Breaker.State, "ten permanent failures in a row: still closed")
	require.Zero(t, st.Breaker.Failures)

	id = submit(t, cl, fmt.Sprintf(`{"id": "not-retryable", "items": %s, %s,
		"agent_template": [{"shell": "echo 404 not found >&2; exit 1", "retry_config": {"attempts": 3, "retry_on": ["network"]}}]}`,
		itemsJSON(10, plainItem), breaker))
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 10, st.DeadLettered)
	require.Equal(t, retry.CircuitClosed, st.Breaker.State, "errors retry_on does not match: still closed")
	require.Zero(t, counter(t, reg, "jetfleet_agent_breaker_parked_total"))

	id = submit(t, cl, fmt.Sprintf(`{"id": "transient", "items": %s, %s,
		"agent_template": [{"shell": "echo connection refused >&2; exit 1", "retry_config": {"attempts": 1}}]}`,
		itemsJSON(3, plainItem), breaker))
	st = waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 3, st.DeadLettered)
	require.Equal(t, retry.CircuitOpen, st.Breaker.State, "three transient failures open it")
}

func plainItem(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("it-%02d", i)} }

// Items a circuit breaker parked come back as soon as it closes, not at
// the end of its timeout: the breaker (timeout 1h) opens on the first
// failure and parks the job's items for an hour; the breaker is then
// closed (its key written closed, as an agent of the pool writes it when
// the probes succeed) and every item runs within seconds.
func TestBreakerClosingReleasesParkedItems(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	const job, n = "released", 8
	dep := newDependency(t, srv, job)
	close(dep.release)
	reg := prometheus.NewRegistry()
	startAgent(t, srv.URL(), agent.Config{Name: "a0", Concurrency: 2, ParkAfter: time.Second, Registerer: reg},
		map[string]agent.HandlerFunc{"dep": dep.handle})
	tr := watchTransitions(t, srv, job)
	cl := client(t, srv)
	submit(t, cl, breakerJobSpec(job, n,
		`{"failure_threshold": 1, "success_threshold": 1, "timeout": "1h", "half_open_requests": 1}`))

	tr.wait(t, "closed>open")
	// Every item is parked: none is left in the work stream's consumer.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if p := counter(t, reg, "jetfleet_agent_breaker_parked_total"); p < n {
			return fmt.Errorf("%v of %d items parked", p, n)
		}
		info, err := srv.JS().Stream(context.Background(), breakerNames.ParkStream(messages.DefaultPool))
		if err != nil {
			return err
		}
		if msgs := info.CachedInfo().State.Msgs; msgs < n {
			return fmt.Errorf("%d schedules in the park stream", msgs)
		}
		return nil
	})
	st, err := cl.JobStatus(context.Background(), job)
	require.NoError(t, err)
	require.Zero(t, st.Succeeded, "%+v", st)

	dep.up.Store(true)
	t0 := time.Now()
	_, err = dep.breakers.Put(context.Background(), messages.DefaultPool+"."+job, []byte(`{"state":"closed"}`))
	require.NoError(t, err)
	final := waitJob(t, cl, job, 60*time.Second)
	require.Equal(t, messages.StateSucceeded, final.State)
	require.EqualValues(t, n, final.Succeeded)
	require.EqualValues(t, dep.failed.Load(), final.Retries, "only the failed runs were retried: parking spends nothing")
	require.Less(t, time.Since(t0), 50*time.Second, "the parked items waited for their schedules")
	require.GreaterOrEqual(t, counterWith(t, reg, "jetfleet_agent_parked_total", "kind", "released"), float64(n))
	t.Logf("job done %v after the breaker closed", time.Since(t0).Round(time.Millisecond))
}
