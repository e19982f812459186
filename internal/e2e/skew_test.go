package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// skew is how far the skewed agents' clocks are off: one ahead, one behind.
const skew = 2 * time.Minute

// skewedAgents starts two agents whose clocks are skew ahead and skew
// behind the machine's (each a clock.Server over it, as every agent's
// default clock is over the system clock), with handlers, parking retries
// of 1 s and more.
func skewedAgents(t *testing.T, srv *fleettest.Server, handlers func(name string) map[string]agent.HandlerFunc) {
	for _, a := range []struct {
		name string
		by   time.Duration
	}{{"ahead", skew}, {"behind", -skew}} {
		clk := clock.NewServer(clock.Offset{By: a.by})
		cfg := testhooks.WithAgent(agent.Config{Name: a.name, Concurrency: 4, ParkAfter: time.Second},
			testhooks.Agent{Clock: clk, Provision: calmProvision})
		startAgent(t, srv.URL(), cfg, handlers(a.name))
	}
}

// skewRuns keeps when each item ran, by the machine's clock.
type skewRuns struct {
	mu   sync.Mutex
	runs map[string][]time.Time
	by   map[string]int // runs per agent
}

func (l *skewRuns) add(item, agentName string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[item] = append(l.runs[item], time.Now())
	l.by[agentName]++
	return len(l.runs[item])
}

// TestSkewedAgentsParkForTheirDelay: of two agents, one's clock 2 minutes
// ahead and the other's 2 minutes behind, each item's retry, parked for
// 3 s, comes back after 3 s: not 2 minutes later (parked "forever" by the
// agent ahead, whose deadline the server's schedule would take as 2
// minutes further away) and not at once (released early by the agent
// behind). Their clocks learn the server's time from the messages they
// receive (clock.Server; docs/design.md, "Clocks").
func TestSkewedAgentsParkForTheirDelay(t *testing.T) {
	t.Parallel() // its own server; its bounds are the parking delay and breaker timeout from below, and a deadline of half the skew
	const n, delay = 24, 3 * time.Second
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	log := &skewRuns{runs: map[string][]time.Time{}, by: map[string]int{}}
	skewedAgents(t, srv, func(name string) map[string]agent.HandlerFunc {
		return map[string]agent.HandlerFunc{"once": func(_ context.Context, c *agent.Call) (any, error) {
			if log.add(c.ItemID, name) == 1 {
				return nil, errors.New("503 Service Unavailable")
			}
			return "ok", nil
		}}
	})
	cl := client(t, srv)
	start := time.Now()
	id := submit(t, cl, fmt.Sprintf(`{"id": "skew-park", "items": %s, "retry_budget": %d,
		"agent_template": [{"handler": "once", "retry_config": {"attempts": 2, "backoff": "fixed",
		"initial_delay": "3s", "max_delay": "3s", "jitter": false}}]}`,
		itemsJSON(n, func(i int) map[string]any { return map[string]any{"id": fmt.Sprintf("i%d", i)} }), n))
	// Far less than the skew: an item parked by the agent ahead on its own
	// clock would not be back within it.
	st := waitJob(t, cl, id, skew/2)
	require.EqualValues(t, n, st.Succeeded, "%+v", st)
	log.mu.Lock()
	defer log.mu.Unlock()
	var shortest, longest time.Duration
	for item, runs := range log.runs {
		require.Len(t, runs, 2, "item %s", item)
		back := runs[1].Sub(runs[0])
		if shortest == 0 || back < shortest {
			shortest = back
		}
		longest = max(longest, back)
		// The server's time is learnt from messages stamped before they
		// arrive: a deadline may be early by that delivery's lag, never
		// more than a fraction of a second here.
		require.GreaterOrEqual(t, back, delay-time.Second, "item %s came back after %s, parked for %s", item, back, delay)
	}
	require.Positive(t, log.by["ahead"], "runs per agent %v", log.by)
	require.Positive(t, log.by["behind"], "runs per agent %v", log.by)
	t.Logf("retries came back %s to %s after their failure (parked for %s); runs per agent %v; job took %s",
		shortest.Round(time.Millisecond), longest.Round(time.Millisecond), delay, log.by, time.Since(start).Round(time.Millisecond))
}

// TestSkewedAgentsShareABreaker: the same two agents share a job's
// circuit breaker. Whichever opens it, it stays open its whole timeout for
// both (not half-opened at once by the agent that reads the other's
// opened_at as minutes old), then half-opens (not held for minutes by the
// agent that reads it as in its future), and its probes close it.
func TestSkewedAgentsShareABreaker(t *testing.T) {
	t.Parallel() // its own server; its bounds are the parking delay and breaker timeout from below, and a deadline of half the skew
	const n, timeout = 16, 3 * time.Second
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	const job = "skew-breaker"
	dep := newDependency(t, srv, job)
	close(dep.release) // probes do not wait
	var mu sync.Mutex
	var firstUp time.Time
	skewedAgents(t, srv, func(string) map[string]agent.HandlerFunc {
		return map[string]agent.HandlerFunc{"dep": func(ctx context.Context, c *agent.Call) (any, error) {
			if dep.up.Load() {
				mu.Lock()
				if firstUp.IsZero() {
					firstUp = time.Now()
				}
				mu.Unlock()
			}
			return dep.handle(ctx, c)
		}}
	})
	tr := watchTransitions(t, srv, job)
	cl := client(t, srv)
	submit(t, cl, breakerJobSpec(job, n,
		fmt.Sprintf(`{"failure_threshold": 3, "success_threshold": 2, "timeout": %q, "half_open_requests": 2}`, timeout)))
	tr.wait(t, "closed>open")
	// When it opened, by the server's clock: the breaker key's last write.
	e, err := dep.breakers.Get(context.Background(), messages.DefaultPool+"."+job)
	require.NoError(t, err)
	opened := e.Created()
	require.True(t, dep.state(context.Background()).Is(retry.CircuitOpen))
	dep.up.Store(true)

	st := waitJob(t, cl, job, skew/2)
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, n, st.Succeeded)
	tr.wait(t, "closed>open", "open>half_open", "half_open>closed")
	mu.Lock()
	defer mu.Unlock()
	require.False(t, firstUp.IsZero())
	held := firstUp.Sub(opened)
	require.GreaterOrEqual(t, held, timeout-time.Second, "the first probe ran %s after the breaker opened (timeout %s)", held, timeout)
	t.Logf("breaker opened, first probe %s later (timeout %s); transitions %v", held.Round(time.Millisecond), timeout, tr.get())
}

// coordSkew is how far the skewed coordinators' clocks are off: one ahead,
// one behind. A tick held or fired early by a coordinator that trusts its
// own clock is off by this much, far more than any hand-over takes on a
// loaded machine, so neither can pass for the other.
const coordSkew = 10 * time.Minute

// TestSkewedCoordinatorsTickOnce: two coordinators, one's clock 10 minutes
// ahead and the other's 10 minutes behind, share an every-2s schedule; the
// one ahead leads, then stops and the other takes over. Every tick is
// fired once or skipped once, none twice, at the server's time: not 10
// minutes early (the one ahead), and not held for 20 minutes after the
// handover (the one behind, waiting for a tick its predecessor put 20 of
// its minutes in the future). The ticks are checked against what the test
// saw of the machine's clock (before the schedule was created, after its
// last tick was decided), never against how long the test took.
func TestSkewedCoordinatorsTickOnce(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	srv := fleettest.RunServer(t)
	coord := func(name string, by time.Duration) *proc {
		return startCoordinator(t, srv.URL(), testhooks.WithCoordinator(coordinator.Config{Holder: name},
			testhooks.Coordinator{Clock: clock.NewServer(clock.Offset{By: by})}))
	}
	ahead := coord("ahead", coordSkew)
	cl := client(t, srv)
	fleettest.WaitFor(t, 30*time.Second, func() error { // the one ahead leads
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cl.ScheduleList(ctx)
		return err
	})
	coord("behind", -coordSkew)
	startAgent(t, srv.URL(), agent.Config{Name: "a0"}, map[string]agent.HandlerFunc{"quick": sleepy(10 * time.Millisecond)})
	ctx := context.Background()
	before := time.Now()
	s, err := cl.ScheduleAdd(ctx, messages.ScheduleSpec{Name: "hb", Every: messages.Duration(every),
		Job: json.RawMessage(`{"items":[{"id":"a"}],"agent_template":[{"handler":"quick"}]}`)})
	require.NoError(t, err)
	// Created at the server's time (this machine's), not the leader's own:
	// between the request and its answer, give or take the moment a
	// server clock may be off (clock.Server) and the anchor's truncation
	// to the second.
	require.True(t, !s.CreatedAt.Before(before.Add(-every)) && !s.CreatedAt.After(time.Now().Add(every)),
		"created at %s, asked between %s and now", s.CreatedAt.Format(time.TimeOnly), before.Format(time.TimeOnly))
	// decidedTo waits until the ticks up to at least `to` are decided
	// (fired or skipped) and their runs submitted. Its deadline only ends
	// a failing run: a held schedule waits coordSkew.
	decidedTo := func(to time.Time) *messages.Schedule {
		t.Helper()
		var got *messages.Schedule
		fleettest.WaitFor(t, coordSkew/4, func() error {
			var err error
			got, err = cl.ScheduleGet(ctx, "hb")
			if err == nil && (got.LastTick.Before(to) || unsubmittedRun(got)) {
				err = fmt.Errorf("ticks decided to %s, waiting for %s", got.LastTick.Format(time.TimeOnly), to.Format(time.TimeOnly))
			}
			return err
		})
		// Never ahead of the server's time (this machine's).
		require.False(t, got.LastTick.After(time.Now().Add(every)), "tick %s decided at %s", got.LastTick, time.Now())
		return got
	}
	decidedTo(time.Now().Add(3 * every))
	ahead.stop(t) // the one behind leads on
	got := decidedTo(time.Now().Add(3 * every))
	require.NoError(t, cl.ScheduleRemove(ctx, "hb"))

	end := time.Now()
	seen := map[time.Time]string{}
	for _, r := range got.Runs {
		_, dup := seen[r.Tick]
		require.False(t, dup, "tick %s fired twice", r.Tick)
		seen[r.Tick] = "run"
		// At the server's time: after the schedule was created and before
		// the test read its last tick (ticks are created + k·every).
		require.True(t, r.Tick.After(before.Add(-every)) && !r.Tick.After(end.Add(every)),
			"tick %s (fired at %s) outside the schedule's life, %s to %s", r.Tick.Format(time.TimeOnly),
			r.Decided.Format(time.TimeOnly), before.Format(time.TimeOnly), end.Format(time.TimeOnly))
	}
	for _, k := range got.Skips {
		for tick := k.First; !tick.After(k.Last); tick = tick.Add(every) {
			_, dup := seen[tick]
			require.False(t, dup, "tick %s both run and skipped", tick)
			seen[tick] = "skip " + k.Reason
		}
	}
	first := got.Runs[0].Tick
	for tick := first; !tick.After(got.LastTick); tick = tick.Add(every) {
		require.Contains(t, seen, tick, "tick %s neither fired nor skipped", tick)
	}
	t.Logf("%d runs, %d skips, ticks %s..%s", len(got.Runs), len(got.Skips), first.Format(time.TimeOnly), got.LastTick.Format(time.TimeOnly))
}
