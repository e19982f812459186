package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// downstream is a fake HTTP dependency that logs every request: when it
// arrived, under which tag (a query value), and how many were in flight.
type downstream struct {
	*httptest.Server
	latency time.Duration
	// status, when set, answers instead of 200.
	status func(at time.Time) int

	mu          sync.Mutex
	arrivals    []time.Time
	tags        []string
	paths       []string
	inFlight    int
	maxInFlight int
}

func newDownstream(t *testing.T, latency time.Duration) *downstream {
	d := &downstream{latency: latency}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		d.mu.Lock()
		d.arrivals = append(d.arrivals, now)
		d.tags = append(d.tags, r.URL.Query().Get("tag"))
		d.paths = append(d.paths, r.URL.Path+"?"+r.URL.RawQuery)
		d.inFlight++
		d.maxInFlight = max(d.maxInFlight, d.inFlight)
		d.mu.Unlock()
		time.Sleep(d.latency) // the dependency's own work
		code := http.StatusOK
		if d.status != nil {
			code = d.status(now)
		}
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
		w.WriteHeader(code)
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	}))
	t.Cleanup(d.Close)
	return d
}

// maxWindow is the most requests (of tag, or all when tag is "") that
// arrived in any window of length w.
func (d *downstream) maxWindow(tag string, w time.Duration) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ts []time.Time
	for i, t := range d.arrivals {
		if tag == "" || d.tags[i] == tag {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// repeated lists the requests made more than once.
func (d *downstream) repeated() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := map[string]time.Time{}
	var rep []string
	for i, p := range d.paths {
		if t0, ok := first[p]; ok {
			rep = append(rep, fmt.Sprintf("%s again after %s", p, d.arrivals[i].Sub(t0)))
			continue
		}
		first[p] = d.arrivals[i]
	}
	return rep
}

func (d *downstream) count() (n int, first, last time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.arrivals) == 0 {
		return 0, first, last
	}
	return len(d.arrivals), slices.MinFunc(d.arrivals, time.Time.Compare), slices.MaxFunc(d.arrivals, time.Time.Compare)
}

func limitStore(t *testing.T, srv *fleettest.Server) *limit.Store {
	t.Helper()
	js, err := jetstream.New(srv.Conn())
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), testNames().LimitsBucket())
	require.NoError(t, err)
	s, err := limit.NewStore(js, kv, nil, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func testNames() messages.Names { return messages.MustNames("fleet") }

// loopback lets the agents' http steps reach the tests' servers, which the
// default refuses (agent.Config.HTTPAllow; the coordinator's
// Config.HTTPAllow at submission).
var loopback = []string{"127.0.0.0/8"}

// Two jobs of 150 items share a named limit of 40/s, burst 10, 6 in
// flight, through the http handler, on two agents of 16 slots each: some
// 7.5 s at the limit's rate.
func TestLimitSharedByTwoJobs(t *testing.T) {
	t.Parallel()
	const perJob = 150
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), HTTPAllow: loopback})
	ds := newDownstream(t, 20*time.Millisecond)
	store := limitStore(t, srv)
	_, err := store.Set(context.Background(), "api", messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6})
	require.NoError(t, err)
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 16, HTTPAllow: loopback}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	c := client(t, srv)
	spec := func(job string) string {
		return `{"id": "` + job + `", "items": ` + itemsJSON(perJob, func(i int) map[string]any { return map[string]any{"i": i} }) + `,
		  "agent_template": [{"handler": "http", "limit": "api",
		    "with": {"url": "` + ds.URL + `/call/${item.i}?tag=${job_id}"}}]}`
	}
	// Which agents hold the limit's slots, sampled while the jobs run:
	// both get a share (the first to fill the slots does not keep them).
	held := map[string]int{}
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if rec, ok, err := store.View(context.Background(), limit.NamedKey("api")); err == nil && ok {
				for a, h := range rec.Holders {
					_, a, _ = strings.Cut(a, "/") // <pool>/<agent>
					held[strings.SplitN(a, ".", 2)[0]] += h.Slots
				}
			}
		}
	}()
	start := time.Now()
	ids := []string{submit(t, c, spec("lim-a")), submit(t, c, spec("lim-b"))}
	for _, id := range ids {
		st := waitJob(t, c, id, 120*time.Second)
		require.Equal(t, int64(perJob), st.Succeeded, "%+v", st)
	}
	close(stop)
	<-sampled
	t.Logf("slots held by agent over the samples: %v", held)
	require.Greater(t, held["a1"], held["a2"]/4, "a1 gets a fair part of the slots")
	require.Greater(t, held["a2"], held["a1"]/4, "a2 gets a fair part of the slots")
	n, first, last := ds.count()
	elapsed := last.Sub(first)
	t.Logf("%d calls in %s (%.1f/s), from %s after submission; busiest second %d calls, at most %d in flight",
		n, elapsed, float64(n-1)/elapsed.Seconds(), first.Sub(start), ds.maxWindow("", time.Second), ds.maxInFlight)
	require.Equal(t, 2*perJob, n, "every item called once; called twice: %v", ds.repeated())
	require.LessOrEqual(t, ds.maxWindow("", time.Second), 50, "rate + burst per second")
	require.LessOrEqual(t, ds.maxInFlight, 6, "concurrency")
	// Asserted under load and -race too: a freed slot goes to the agent's
	// next call or wakes the waiting agents, so the rate binds, not the
	// agents' own speed. A whole `go test ./...` on a 2-core machine
	// (2026-11-29) got 29.8 calls/s of the 40.
	require.GreaterOrEqual(t, float64(n-1)/elapsed.Seconds(), 0.65*40, "the jobs get at least 65%% of the limit")
	// The record counts calls, not tokens leased (unused ones go back with
	// the agents' writes), and every slot goes back: a run's release, and
	// the agents' spare slots 50 ms after their last run, may land after
	// the job's last result.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		rec, ok, err := store.View(context.Background(), limit.NamedKey("api"))
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("no record")
		case rec.Stats.Calls+rec.Stats.PrevCalls != 2*perJob || rec.InFlight(time.Now()) != 0:
			return fmt.Errorf("the record counts %d calls and %d slots in flight, want %d and 0",
				rec.Stats.Calls+rec.Stats.PrevCalls, rec.InFlight(time.Now()), 2*perJob)
		}
		return nil
	})
}

// An inline limit keyed by tenant gives each tenant its own rate.
func TestLimitKeyedPerTenant(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), HTTPAllow: loopback})
	ds := newDownstream(t, 5*time.Millisecond)
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a1", Concurrency: 16, HTTPAllow: loopback}, testhooks.Agent{Provision: calmProvision}), nil)
	c := client(t, srv)
	tenants := []string{"red", "green", "blue"}
	id := submit(t, c, `{"items": `+itemsJSON(90, func(i int) map[string]any { return map[string]any{"tenant": tenants[i%3]} })+`,
	  "agent_template": [{"handler": "http", "limit": {"key": "t:${item.tenant}", "rate": "10/s", "burst": 2},
	    "with": {"url": "`+ds.URL+`/t?tag=${item.tenant}"}}]}`)
	st := waitJob(t, c, id, 60*time.Second)
	require.Equal(t, int64(90), st.Succeeded)
	for _, tn := range tenants {
		require.LessOrEqual(t, ds.maxWindow(tn, time.Second), 12, "tenant %s: its own rate + burst", tn)
	}
	require.Greater(t, ds.maxWindow("", time.Second), 12, "the tenants' limits are separate: together they exceed one's")
	store := limitStore(t, srv)
	keys, err := store.Keys(context.Background())
	require.NoError(t, err)
	require.Len(t, keys, 3)
	for _, k := range keys {
		name, named := limit.KeyName(k)
		require.False(t, named)
		require.True(t, strings.HasPrefix(name, "t:"), name)
	}
}

// An agent killed while its calls hold a limit's slots does not leak them:
// the slots come back when its lease ends, and another agent finishes the
// items.
func TestLimitSlotsOfAKilledAgentExpire(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{HTTPAllow: loopback}) // a short crash timeout: the victim's items come back soon
	store := limitStore(t, srv)
	_, err := store.Set(context.Background(), "slow", messages.LimitConfig{Concurrency: 2})
	require.NoError(t, err)
	started := make(chan struct{}, 2)
	victim := startAgent(t, srv.URL(), agent.Config{Name: "victim", Concurrency: 4, LimitLease: time.Second}, map[string]agent.HandlerFunc{
		"call": func(ctx context.Context, _ *agent.Call) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	c := client(t, srv)
	id := submit(t, c, `{"items": [1, 2, 3], "agent_template": [{"handler": "call", "limit": "slow"}]}`)
	for range 2 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the calls did not start")
		}
	}
	inFlight := func() int {
		rec, _, err := store.View(context.Background(), limit.NamedKey("slow"))
		require.NoError(t, err)
		return rec.InFlight(time.Now())
	}
	require.Equal(t, 2, inFlight(), "the victim holds both slots; the third item waits")
	victim.kill(t)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if n := inFlight(); n != 0 {
			return fmt.Errorf("%d slots still held", n)
		}
		return nil
	})
	startAgent(t, srv.URL(), agent.Config{Name: "heir", Concurrency: 4}, map[string]agent.HandlerFunc{
		"call": func(context.Context, *agent.Call) (any, error) { return "done", nil },
	})
	st := waitJob(t, c, id, 60*time.Second)
	require.Equal(t, int64(3), st.Succeeded)
	// The heir may keep a slot for calls to come: it gives it back once
	// it idles (spareIdle in internal/limit).
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if n := inFlight(); n != 0 {
			return fmt.Errorf("%d slots still held", n)
		}
		return nil
	})
}

// windowRate is the requests per second that arrived in [from, to).
func (d *downstream) windowRate(from, to time.Time) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, t := range d.arrivals {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// An adaptive limit: while the dependency answers 503 for 12 s the fleet's call
// rate falls to a quarter of the healthy rate within 3 s, and comes back
// to 80 % of it within 15 s of the recovery. The job is cancelled once
// those 15 s are measured: the rest of its 1,200 items (some 15 s more at
// the limit's rate) would show nothing the test asserts.
func TestLimitAdaptiveOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 31 s run")
	}
	// Alone, not beside the package's parallel tests: its healthy rate and
	// its outage are held to the simulator's within a tenth, and beside
	// them, in a whole `go test ./...` on a 2-core machine, the fleet's
	// healthy rate fell to 33.3/s of the limit's 40 (2026-11-29): the
	// machine's load, not the limiter, which the bound is about.
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), HTTPAllow: loopback})
	ds := newDownstream(t, 5*time.Millisecond)
	const healthyFor, outage = 4 * time.Second, 12 * time.Second
	ds.status = func(at time.Time) int {
		ds.mu.Lock()
		begin := ds.arrivals[0] // the first call's arrival
		ds.mu.Unlock()
		if s := at.Sub(begin); s >= healthyFor && s < healthyFor+outage {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	store := limitStore(t, srv)
	_, err := store.Set(context.Background(), "flaky", messages.LimitConfig{Rate: 40, Burst: 10, Adaptive: true})
	require.NoError(t, err)
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 16, HTTPAllow: loopback}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	c := client(t, srv)
	spec := `{"items": ` + itemsJSON(1200, func(i int) map[string]any { return map[string]any{"i": i} }) + `,
	  "retry_budget": 100000,
	  "agent_template": [{"handler": "http", "limit": "flaky", "with": {"url": "` + ds.URL + `/i/${item.i}"},
	    "retry_config": {"attempts": 40, "backoff": "fixed", "initial_delay": "200ms", "jitter": true}}]}`
	id := submit(t, c, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	fleettest.WaitFor(t, 60*time.Second, func() error {
		if n, _, _ := ds.count(); n == 0 {
			return errNotYet
		}
		return nil
	})
	ds.mu.Lock()
	begin := ds.arrivals[0]
	ds.mu.Unlock()
	outStart := begin.Add(healthyFor)
	outEnd := outStart.Add(outage)
	// Wait until 15 s after the recovery (or the job's end).
	fleettest.WaitFor(t, 60*time.Second, func() error {
		if time.Now().Before(outEnd.Add(15 * time.Second)) {
			st, err := c.JobStatus(ctx, id)
			if err == nil && st.Done() >= st.Items {
				return nil
			}
			return errNotYet
		}
		return nil
	})
	healthy := ds.windowRate(begin.Add(time.Second), outStart)
	during := ds.windowRate(outStart.Add(3*time.Second), outEnd)
	best, bestAt := 0.0, time.Duration(0)
	for off := time.Duration(0); off < 14*time.Second; off += 250 * time.Millisecond {
		if r := ds.windowRate(outEnd.Add(off), outEnd.Add(off+time.Second)); r > best {
			best, bestAt = r, off
		}
	}
	rec, _, err := store.View(ctx, limit.NamedKey("flaky"))
	require.NoError(t, err)
	n, first, last := ds.count()
	st, _ := c.JobStatus(ctx, id)
	t.Logf("%d calls from %s to %s; job %+v", n, first.Sub(begin), last.Sub(begin), st)
	t.Logf("healthy %.1f/s; outage after 3 s %.1f/s; best second after recovery %.1f/s, %s after it; limit now %.1f/s, %d overloads counted",
		healthy, during, best, bestAt, rec.Rate(), rec.Stats.Overloads+rec.Stats.PrevOverloads)
	require.LessOrEqual(t, during, 0.25*healthy, "the rate falls during the outage")
	afterCalls := ds.windowRate(outEnd, outEnd.Add(15*time.Second)) * 15

	// The same run through the simulator (internal/simulate), its time 0 the
	// first call's arrival.
	parsed, err := jobspec.Parse([]byte(spec))
	require.NoError(t, err)
	r, err := simulate.Run(ctx, simulate.Config{
		Spec: parsed, Items: 1200,
		Fleet:      simulate.Fleet{Agents: 2, Concurrency: 16, MaxDeliver: calmProvision.MaxDeliver},
		Dependency: simulate.Dependency{StepDuration: 5 * time.Millisecond, OutageAt: healthyFor, Outage: outage, ErrorRate: 1},
		Limit:      messages.LimitConfig{Rate: 40, Burst: 10, Adaptive: true},
	})
	require.NoError(t, err)
	simRate := func(from, to time.Duration) float64 {
		var n int64
		for i := int(from / time.Second); i < int(to/time.Second) && i < len(r.Series.Attempts); i++ {
			n += r.Series.Attempts[i]
		}
		return float64(n) / (to - from).Seconds()
	}
	simHealthy, simDuring := simRate(time.Second, healthyFor), simRate(healthyFor+3*time.Second, healthyFor+outage)
	simAfter := simRate(healthyFor+outage, healthyFor+outage+15*time.Second) * 15
	t.Logf("simulated: healthy %.1f/s (fleet %.1f), outage after 3 s %.1f/s (fleet %.1f), 15 s after it %.0f calls (fleet %.0f)",
		simHealthy, healthy, simDuring, during, simAfter, afterCalls)
	require.LessOrEqual(t, simDuring, 0.25*simHealthy)
	require.InDelta(t, during, simDuring, 0.1*healthy, "the outage's rates agree within a tenth of the healthy rate")
	// Asserted whatever the machine's load, and under -race: the agents
	// lease enough tokens per take to carry the limit's rate however long
	// a take's round trip (limit.Limiter), so the limit binds, not the
	// agents' speed, and the simulator's agents, which take no time,
	// are a fair model.
	require.GreaterOrEqual(t, healthy, 0.75*40, "the limit lets the job use it")
	require.GreaterOrEqual(t, best, 0.8*healthy, "the rate comes back after the outage")
	require.InEpsilon(t, healthy, simHealthy, 0.1, "the simulator agrees on the healthy rate")
	// The recovery's additive raises come one per success, as its outcome
	// is written: each waits for a call and a write whose round trips the
	// simulator does not model (its agents take no time). So the fleet
	// lags it, the more the busier the machine, and never runs ahead:
	// 448 calls against 471 on a quiet machine; 406 beside the package's
	// parallel tests at load 4-7; 408 under -race; 369 in a whole
	// `go test ./...` on a 2-core machine (2026-11-29). A recovery that
	// does not raise stays at the floor, a tenth of those.
	require.GreaterOrEqual(t, afterCalls, 0.65*simAfter, "the calls after the outage: not far behind the simulator's")
	require.LessOrEqual(t, afterCalls, 1.1*simAfter, "the calls after the outage: not ahead of the simulator's")
	if st, err := c.JobStatus(ctx, id); err == nil && st.Done() < st.Items {
		_, err = c.JobCancel(ctx, id)
		require.NoError(t, err)
	}
	st = waitJob(t, c, id, 120*time.Second)
	t.Logf("job at its end: %+v", st)
}

// A limit with only a concurrency cap binds the fleet to cap / call
// duration, and the simulator, given the same job, fleet and limit, agrees
// on the rate: the fleet within 20 % below and 10 % above it.
func TestLimitConcurrencyAgreesWithSimulator(t *testing.T) {
	t.Parallel()
	const (
		items   = 240
		cap     = 4
		latency = 100 * time.Millisecond
	)
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), HTTPAllow: loopback})
	ds := newDownstream(t, latency)
	store := limitStore(t, srv)
	_, err := store.Set(context.Background(), "narrow", messages.LimitConfig{Concurrency: cap})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 16, HTTPAllow: loopback, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"agent": name}, reg)},
			testhooks.Agent{Provision: calmProvision}), nil)
	}
	c := client(t, srv)
	spec := `{"items": ` + itemsJSON(items, func(i int) map[string]any { return map[string]any{"i": i} }) + `,
	  "agent_template": [{"handler": "http", "limit": "narrow", "with": {"url": "` + ds.URL + `/i/${item.i}"}}]}`
	st := waitJob(t, c, submit(t, c, spec), 120*time.Second)
	require.Equal(t, int64(items), st.Succeeded, "%+v", st)
	n, first, last := ds.count()
	require.Equal(t, items, n, "every item called once; called twice: %v", ds.repeated())
	require.LessOrEqual(t, ds.maxInFlight, cap, "the cap holds")
	fleet := float64(n-1) / last.Sub(first).Seconds()
	// The simulator's step lasts as long as the fleet's runs of it did in
	// this run (the agents' step duration metric): the dependency's 100 ms
	// and the handler's own time, which grows with the machine's load.
	// What the fleet adds between a run's end and the next run's start
	// on the freed slot is the limiter's, and must stay small.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	var count uint64
	for _, mf := range mfs {
		if mf.GetName() == "jetfleet_agent_step_duration_seconds" {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	require.Equal(t, uint64(items), count, "a duration for every run")
	step := time.Duration(sum / float64(count) * float64(time.Second))
	require.GreaterOrEqual(t, step, latency)

	parsed, err := jobspec.Parse([]byte(spec))
	require.NoError(t, err)
	r, err := simulate.Run(context.Background(), simulate.Config{
		Spec: parsed, Items: items,
		Fleet:      simulate.Fleet{Agents: 2, Concurrency: 16, MaxDeliver: calmProvision.MaxDeliver},
		Dependency: simulate.Dependency{StepDuration: step},
		Limit:      messages.LimitConfig{Concurrency: cap},
	})
	require.NoError(t, err)
	require.Equal(t, int64(items), r.Succeeded)
	// The same measure as the fleet's: from the first call's start to the
	// last one's.
	sim := float64(r.Attempts-1) / (r.Duration - step).Seconds()
	t.Logf("fleet %.1f calls/s, at most %d in flight, runs of %s on average; simulated %.1f calls/s; cap / run %.1f/s",
		fleet, ds.maxInFlight, step, sim, cap/step.Seconds())
	// A waiting agent asks again once per SlotPoll while the cap is full
	// (the simulator runs the fleet's own limiter code), so how much of a
	// handover a run waits depends on where the step's length falls
	// between polls: over steps of 100-112 ms the simulator gave 0.895-1.012
	// of cap / step (0.895 at the 104 ms a loaded run measured).
	require.InEpsilon(t, cap/step.Seconds(), sim, 0.12, "the simulator's rate is the cap's")
	// The fleet loses a little to each handover of a slot between agents
	// (a KV round trip, and the other agent's next poll), which the
	// simulator models only as the poll: under a loaded -race run the
	// fleet fell 13 % below it (34.2 against 39.3 calls/s, CI), at rest
	// 2-6 %, and 22 % in a whole `go test ./...` on a 2-core machine
	// (25.3 against 32.6, runs of 124 ms for the downstream's 100: the
	// machine, not the limiter). Never above the simulator by more than
	// noise; below it by at most a third (a starved limiter, slots not
	// handed over, falls far further).
	require.GreaterOrEqual(t, fleet, 0.65*sim, "the fleet keeps up with the simulator (the limiter does not starve it)")
	require.LessOrEqual(t, fleet, 1.1*sim, "the fleet runs no faster than the cap allows")
}

// BenchmarkLimitOverhead measures what a limit far above the fleet's speed
// costs: two agents of 16 slots run jobs of no-op items without a limit,
// with a named limit of 1,000,000/s, and with that rate and a cap of 1,000
// in flight, alternating (each round runs the three in a rotated order),
// and it reports each limited variant's rate as a ratio of the unlimited
// one's in the same round, the median over the rounds. Absolute rates from
// a loaded machine mean little; the ratios are the result
// (docs/benchmarks.md).
//
//	go test ./internal/e2e -run '^$' -bench LimitOverhead -benchtime 1x
func BenchmarkLimitOverhead(b *testing.B) {
	const items, rounds = 10000, 5
	srv := fleettest.RunServer(b)
	startCoordinator(b, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), HTTPAllow: loopback})
	js, err := jetstream.New(srv.Conn())
	require.NoError(b, err)
	var kv jetstream.KeyValue
	fleettest.WaitFor(b, 20*time.Second, func() error {
		kv, err = js.KeyValue(context.Background(), testNames().LimitsBucket())
		return err
	})
	store, err := limit.NewStore(js, kv, nil, zerolog.Nop())
	require.NoError(b, err)
	b.Cleanup(store.Close)
	_, err = store.Set(context.Background(), "roomy", messages.LimitConfig{Rate: 1_000_000})
	require.NoError(b, err)
	_, err = store.Set(context.Background(), "roomy-capped", messages.LimitConfig{Rate: 1_000_000, Concurrency: 1000})
	require.NoError(b, err)
	// The agents' limit metrics: KV takes and calls that waited in the
	// agent, per limit, over the whole benchmark.
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a1", "a2"} {
		startAgent(b, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 16, HTTPAllow: loopback, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"agent": name}, reg)},
			testhooks.Agent{Provision: calmProvision}), nil)
	}
	c := client(b, srv)
	payload := itemsJSON(items, func(i int) map[string]any { return map[string]any{"i": i} })
	variants := []struct{ name, limit string }{{"none", ""}, {"rate", `, "limit": "roomy"`}, {"rate+cap", `, "limit": "roomy-capped"`}}
	run := func(lim string) float64 {
		start := time.Now()
		id := submit(b, c, `{"items": `+payload+`, "agent_template": [{"handler": "noop"`+lim+`}]}`)
		st := waitJob(b, c, id, 5*time.Minute)
		require.Equal(b, int64(items), st.Succeeded)
		return float64(items) / time.Since(start).Seconds()
	}
	run("") // warm up
	ratios := make([][]float64, len(variants))
	for round := range rounds {
		rate := make([]float64, len(variants))
		for k := range variants {
			v := (round + k) % len(variants)
			rate[v] = run(variants[v].limit)
		}
		b.Logf("round %d: none %.0f items/s, rate %.0f (%.2f), rate+cap %.0f (%.2f)",
			round, rate[0], rate[1], rate[1]/rate[0], rate[2], rate[2]/rate[0])
		for v := 1; v < len(variants); v++ {
			ratios[v] = append(ratios[v], rate[v]/rate[0])
		}
	}
	for v := 1; v < len(variants); v++ {
		slices.Sort(ratios[v])
		b.ReportMetric(ratios[v][len(ratios[v])/2], variants[v].name+"/none")
	}
	rec, _, err := store.View(context.Background(), limit.NamedKey("roomy"))
	require.NoError(b, err)
	b.Logf("limit roomy: %d calls in its last minutes", rec.Stats.Calls+rec.Stats.PrevCalls)
	mfs, err := reg.Gather()
	require.NoError(b, err)
	counts := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "limit" {
					counts[mf.GetName()+" "+lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, lim := range []string{"roomy", "roomy-capped"} {
		grants := counts["jetfleet_limit_grants_total "+lim]
		b.Logf("limit %s: %.0f calls, %.0f takes (%.1f calls a take), %.0f calls waited in the agent",
			lim, grants, counts["jetfleet_limit_takes_total "+lim], grants/max(1, counts["jetfleet_limit_takes_total "+lim]),
			counts["jetfleet_limit_waited_total "+lim])
	}
}
