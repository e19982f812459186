package itemrun

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/breaker"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var testNames = messages.MustNames("fleet")

// checkLeaks fails the test if goroutines started during it outlive it,
// servers included: register it first so that it runs last.
func checkLeaks(t *testing.T) { fleettest.VerifyNoLeaks(t) }

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fakeMsg records the naks a delivery gets; nothing else may be called.
type fakeMsg struct {
	jetstream.Msg
	naks []time.Duration // -1 for a bare Nak
}

func (m *fakeMsg) NakWithDelay(d time.Duration) error { m.naks = append(m.naks, d); return nil }
func (m *fakeMsg) Nak() error                         { m.naks = append(m.naks, -1); return nil }

// halfDraw is the gate agents' jitter source: parked deliveries come back
// spread by half of failure.ParkSpread, so a parked delay d is spread(d).
var halfDraw = retry.RandFunc(func() float64 { return 0.5 })

func spread(d time.Duration) time.Duration { return d + d/8 }

// gateAgent is an Agent with only what the breaker gate uses, on its own
// connection to a provisioned server.
func gateAgent(t *testing.T, nc *nats.Conn, name string, clk clock.Clock, maxDeliver uint64) (*Agent, *prometheus.Registry) {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(testCtx(t, 10*time.Second), testNames.BreakerBucket())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	a := &Agent{
		cfg: Config{Name: name, hooks: testhooks.Agent{Clock: clk, Rand: halfDraw}, ParkAfter: -1}.WithDefaults(), nc: nc, log: zerolog.Nop(),
		js: js, pub: js, names: testNames, metrics: newMetrics(reg), maxDeliver: maxDeliver,
	}
	g, err := breaker.NewGate(js, kv, messages.DefaultPool, clk, a.log, a.breakerChanged, nil)
	require.NoError(t, err)
	a.breakers = gateStates{g}
	t.Cleanup(g.Close)
	return a, reg
}

// outcomeOf is a delivery's breaker outcome: failed or succeeded.
func outcomeOf(failed bool) retry.Outcome {
	if failed {
		return retry.OutcomeFailure
	}
	return retry.OutcomeSuccess
}

func provisionAll(t *testing.T, js jetstream.JetStream, replicas int) {
	t.Helper()
	require.NoError(t, provision.Ensure(testCtx(t, 60*time.Second), js, testNames, provision.Config{Replicas: replicas}))
}

// breakerJob compiles a job with a circuit breaker, as the job cache does.
func breakerJob(t *testing.T, id string, cfg messages.CircuitBreakerConfig) *job {
	t.Helper()
	j, err := compileJob(id, &messages.JobSpec{ID: id, ErrorPolicy: &messages.ErrorPolicy{CircuitBreaker: &cfg}})
	require.NoError(t, err)
	require.NotNil(t, j.workflow.Breaker())
	return j
}

func delivery(j *job, itemID string, delivered uint64) (*item, *fakeMsg) {
	m := &fakeMsg{}
	return &item{m: m, md: &jetstream.MsgMetadata{NumDelivered: delivered}, wi: wire.WorkItem{JobID: j.id, ItemID: itemID}, job: j}, m
}

// leaderState reads the job's stored breaker state (pool default's) from
// the stream leader.
func leaderState(t *testing.T, js jetstream.JetStream, job string) (retry.BreakerState, uint64) {
	t.Helper()
	data, rev, err := kvleader.New(js, testNames.BreakerBucket()).Get(testCtx(t, 10*time.Second), messages.DefaultPool+"."+job)
	require.NoError(t, err)
	var rec breaker.Record
	if data != nil {
		require.NoError(t, json.Unmarshal(data, &rec))
	}
	return rec.BreakerState, rev
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() != labels[i+1] {
						continue metric
					}
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// breakerEvents reads the job's CircuitBreakerStateChanged events as "from>to".
func breakerEvents(t *testing.T, js jetstream.JetStream, job string) []string {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	cons, err := js.OrderedConsumer(ctx, testNames.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.AgentEventSubject(testNames, "*", job, messages.EventBreaker)},
	})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	var out []string
	for n := info.NumPending; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		var ev messages.Event
		require.NoError(t, json.Unmarshal(m.Data(), &ev))
		require.Equal(t, "CircuitBreakerStateChanged", ev.Type)
		var d struct{ From, To string }
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		out = append(out, d.From+">"+d.To)
	}
	return out
}

// TestBreakerGateLifecycle walks one job's breaker through every state with
// a hand-moved clock and real KV, as the agent's process path drives it:
// admitBreaker before the steps, settleBreaker after.
func TestBreakerGateLifecycle(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	provisionAll(t, srv.JS(), 1)
	clk := clock.NewManual(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	const maxDeliver = 50
	a, reg := gateAgent(t, srv.Connect(t), "a1", clk, maxDeliver)
	ctx := testCtx(t, 30*time.Second)
	const timeout = 10 * time.Second
	j := breakerJob(t, "lifecycle", messages.CircuitBreakerConfig{
		FailureThreshold: 3, SuccessThreshold: 2, Timeout: messages.Duration(timeout), HalfOpenRequests: 2,
	})
	n := 0
	run := func(delivered uint64) (*item, *fakeMsg, bool) {
		n++
		it, m := delivery(j, fmt.Sprintf("i%d", n), delivered)
		return it, m, a.admitBreaker(ctx, it)
	}
	state := func() retry.BreakerState { st, _ := leaderState(t, srv.JS(), j.id); return st }

	t.Run("closed: consecutive failures open it, a success in between resets them", func(t *testing.T) {
		for _, failed := range []bool{true, true, false, true, true} {
			it, m, ok := run(1)
			require.True(t, ok)
			require.Empty(t, m.naks)
			a.settleBreaker(ctx, it, outcomeOf(failed))
			a.settleBreaker(ctx, it, outcomeOf(!failed)) // a second outcome of one delivery is ignored
		}
		require.Equal(t, retry.BreakerState{State: retry.CircuitClosed, Failures: 2}, state())
		_, rev := leaderState(t, srv.JS(), j.id)
		it, _, _ := run(1)
		a.settleBreaker(ctx, it, outcomeOf(true)) // the third consecutive failure
		st := state()
		require.True(t, st.Is(retry.CircuitOpen), "%+v", st)
		require.True(t, st.OpenedAt.Equal(clk.Now()))
		_, _, ok := run(1)
		require.False(t, ok)
		_, rev2 := leaderState(t, srv.JS(), j.id)
		require.Equal(t, rev+1, rev2, "one write opened it; parking writes nothing")
		require.Equal(t, 1.0, counter(t, reg, "jetfleet_agent_breaker_parked_total"))
	})

	t.Run("open: items are parked until the timeout, unspent", func(t *testing.T) {
		clk.Advance(4 * time.Second)
		_, m, ok := run(3)
		require.False(t, ok)
		require.Equal(t, []time.Duration{spread(6 * time.Second)}, m.naks, "parked until the open period ends, spread")
		require.Equal(t, 2.0, counter(t, reg, "jetfleet_agent_breaker_parked_total"))
		// An item admitted before it opened reports: ignored.
		it, _ := delivery(j, "early", 1)
		it.breaker = breakerTicket{b: j.workflow.Breaker()}
		a.settleBreaker(ctx, it, outcomeOf(true))
		require.True(t, state().Is(retry.CircuitOpen))
	})

	t.Run("open: the consumer's last delivery runs anyway, outside the count", func(t *testing.T) {
		it, m, ok := run(maxDeliver)
		require.True(t, ok)
		require.Empty(t, m.naks)
		require.False(t, it.breaker.t.Probe)
		a.settleBreaker(ctx, it, outcomeOf(false))
		require.True(t, state().Is(retry.CircuitOpen))
		require.Equal(t, 2.0, counter(t, reg, "jetfleet_agent_breaker_parked_total"))
	})

	var probes []*item
	t.Run("half-open: exactly half_open_requests probes, the rest parked", func(t *testing.T) {
		clk.Advance(6 * time.Second)
		for range 2 {
			it, m, ok := run(4)
			require.True(t, ok)
			require.Empty(t, m.naks)
			require.True(t, it.breaker.t.Probe)
			probes = append(probes, it)
		}
		_, m, ok := run(4)
		require.False(t, ok)
		require.Equal(t, []time.Duration{spread(timeout / 4)}, m.naks, "asks again a quarter of the timeout later, spread")
		st := state()
		require.True(t, st.Is(retry.CircuitHalfOpen))
		require.Equal(t, 2, st.Probes)
		// A delivery admitted while closed reports now: not a probe, ignored.
		it, _ := delivery(j, "straggler", 1)
		it.breaker = breakerTicket{b: j.workflow.Breaker()}
		a.settleBreaker(ctx, it, outcomeOf(false))
		require.Equal(t, st, state())
	})

	t.Run("half-open: a probe failure re-opens it, the other probe's success is ignored", func(t *testing.T) {
		clk.Advance(time.Second)
		a.settleBreaker(ctx, probes[0], outcomeOf(true))
		st := state()
		require.True(t, st.Is(retry.CircuitOpen))
		require.True(t, st.OpenedAt.Equal(clk.Now()))
		a.settleBreaker(ctx, probes[1], outcomeOf(false))
		require.Equal(t, st, state())
	})

	t.Run("half-open: success_threshold probe successes close it", func(t *testing.T) {
		clk.Advance(timeout)
		p1, _, ok := run(5)
		require.True(t, ok)
		p2, _, ok := run(5)
		require.True(t, ok)
		a.settleBreaker(ctx, p1, outcomeOf(false))
		require.Equal(t, 1, state().Successes)
		p3, _, ok := run(5) // p1 reported: its slot is free again
		require.True(t, ok)
		require.True(t, p3.breaker.t.Probe)
		a.settleBreaker(ctx, p2, outcomeOf(false))
		require.Equal(t, retry.BreakerState{State: retry.CircuitClosed}, state())
		_, rev := leaderState(t, srv.JS(), j.id)
		a.settleBreaker(ctx, p3, outcomeOf(false)) // closed with no failures: no write
		it, m, ok := run(1)
		require.True(t, ok)
		require.Empty(t, m.naks)
		a.settleBreaker(ctx, it, outcomeOf(false))
		_, rev2 := leaderState(t, srv.JS(), j.id)
		require.Equal(t, rev, rev2, "the closed fast path writes nothing")
	})

	t.Run("events and transitions", func(t *testing.T) {
		want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
		fleettest.WaitFor(t, 10*time.Second, func() error {
			if got := breakerEvents(t, srv.JS(), j.id); len(got) < len(want) {
				return fmt.Errorf("%d events so far: %v", len(got), got)
			}
			return nil
		})
		require.Equal(t, want, breakerEvents(t, srv.JS(), j.id))
		require.Equal(t, 2.0, counter(t, reg, "jetfleet_agent_breaker_transitions_total", "to", "open"))
		require.Equal(t, 2.0, counter(t, reg, "jetfleet_agent_breaker_transitions_total", "to", "half_open"))
		require.Equal(t, 1.0, counter(t, reg, "jetfleet_agent_breaker_transitions_total", "to", "closed"))
	})
}

// TestBreakerLostProbesAreWrittenOff: probes that never report (their agent
// died) are written off after the timeout, and their late reports ignored.
func TestBreakerLostProbesAreWrittenOff(t *testing.T) {
	checkLeaks(t)
	srv := fleettest.RunServer(t)
	provisionAll(t, srv.JS(), 1)
	clk := clock.NewManual(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	a, _ := gateAgent(t, srv.Connect(t), "a1", clk, 0)
	ctx := testCtx(t, 30*time.Second)
	j := breakerJob(t, "lost", messages.CircuitBreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: messages.Duration(time.Second), HalfOpenRequests: 1})

	it, _ := delivery(j, "x", 1)
	require.True(t, a.admitBreaker(ctx, it))
	a.settleBreaker(ctx, it, outcomeOf(true))
	clk.Advance(time.Second)
	lost, _ := delivery(j, "lost", 2)
	require.True(t, a.admitBreaker(ctx, lost))
	require.True(t, lost.breaker.t.Probe)
	parked, m := delivery(j, "parked", 2)
	require.False(t, a.admitBreaker(ctx, parked))
	require.Equal(t, []time.Duration{spread(250 * time.Millisecond)}, m.naks)

	clk.Advance(time.Second) // the lost probe's time is up
	next, _ := delivery(j, "next", 3)
	require.True(t, a.admitBreaker(ctx, next))
	require.True(t, next.breaker.t.Probe)
	a.settleBreaker(ctx, lost, outcomeOf(true)) // late: written off, ignored
	st, _ := leaderState(t, srv.JS(), j.id)
	require.True(t, st.Is(retry.CircuitHalfOpen), "%+v", st)
	a.settleBreaker(ctx, next, outcomeOf(false))
	st, _ = leaderState(t, srv.JS(), j.id)
	require.Equal(t, retry.BreakerState{State: retry.CircuitClosed}, st)
}

// TestBreakerAdmitsExactlyTheProbes: 50 concurrent admissions, through 3
// gates on separate connections (3 agents), admit exactly
// half_open_requests probes fleet-wide: compare-and-set decides, on one
// node and on an R3 bucket of a 3-node cluster.
func TestBreakerAdmitsExactlyTheProbes(t *testing.T) {
	type env struct {
		js      jetstream.JetStream
		connect func(t *testing.T) *nats.Conn
	}
	envs := map[string]func(t *testing.T) env{
		"R1": func(t *testing.T) env {
			srv := fleettest.RunServer(t)
			provisionAll(t, srv.JS(), 1)
			return env{srv.JS(), func(t *testing.T) *nats.Conn { return srv.Connect(t) }}
		},
		"R3": func(t *testing.T) env {
			c := fleettest.RunCluster(t, 3)
			provisionAll(t, c.JS(), 3)
			c.WaitForStreamLeader(t, "KV_"+testNames.BreakerBucket())
			return env{c.JS(), func(t *testing.T) *nats.Conn { return c.Connect(t) }}
		},
	}
	const probes, goroutines, gates = 3, 50, 3
	cfg := messages.CircuitBreakerConfig{FailureThreshold: 3, SuccessThreshold: 2, Timeout: messages.Duration(time.Minute), HalfOpenRequests: probes}
	for _, name := range []string{"R1", "R3"} {
		t.Run(name, func(t *testing.T) {
			checkLeaks(t)
			e := envs[name](t)
			var agents []*Agent
			var regs []*prometheus.Registry
			for i := range gates {
				a, reg := gateAgent(t, e.connect(t), fmt.Sprintf("a%d", i), clock.Real{}, 0)
				agents, regs = append(agents, a), append(regs, reg)
			}
			seeds := map[string]retry.BreakerState{
				"half_open":            {State: retry.CircuitHalfOpen, OpenedAt: time.Now().Add(-2 * time.Minute), HalfOpenAt: time.Now()},
				"open_timeout_elapsed": {State: retry.CircuitOpen, OpenedAt: time.Now().Add(-2 * time.Minute)},
			}
			for _, seed := range []string{"half_open", "open_timeout_elapsed"} {
				t.Run(seed, func(t *testing.T) {
					j := breakerJob(t, "cas-"+seed, cfg)
					data, err := json.Marshal(breaker.Record{BreakerState: seeds[seed]})
					require.NoError(t, err)
					kv, err := e.js.KeyValue(testCtx(t, 10*time.Second), testNames.BreakerBucket())
					require.NoError(t, err)
					_, err = kv.Create(testCtx(t, 10*time.Second), messages.DefaultPool+"."+j.id, data)
					require.NoError(t, err)

					transitions := func() float64 {
						sum := 0.0
						for _, reg := range regs {
							sum += counter(t, reg, "jetfleet_agent_breaker_transitions_total")
						}
						return sum
					}
					before := transitions()
					ctx := testCtx(t, 60*time.Second)
					var admitted, probesAdmitted, parked atomic.Int64
					start := make(chan struct{})
					var wg sync.WaitGroup
					for g := range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							it, m := delivery(j, fmt.Sprintf("i%d", g), 2)
							if agents[g%gates].admitBreaker(ctx, it) {
								admitted.Add(1)
								if it.breaker.t.Probe {
									probesAdmitted.Add(1)
								}
								return
							}
							if len(m.naks) == 1 && m.naks[0] > 0 {
								parked.Add(1)
							}
						}()
					}
					close(start)
					wg.Wait()
					require.EqualValues(t, probes, admitted.Load(), "exactly half_open_requests probes fleet-wide")
					require.EqualValues(t, probes, probesAdmitted.Load())
					require.EqualValues(t, goroutines-probes, parked.Load(), "every other delivery parked")
					st, _ := leaderState(t, e.js, j.id)
					require.True(t, st.Is(retry.CircuitHalfOpen), "%+v", st)
					require.Equal(t, probes, st.Probes)
					want := 0.0
					if seed == "open_timeout_elapsed" {
						want = 1 // open → half_open, written once by whichever gate won
					}
					require.Equal(t, want, transitions()-before)
				})
			}
		})
	}
}
