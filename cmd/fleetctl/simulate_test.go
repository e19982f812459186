package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// flakyDependency is the downstream of the agreement test: the calls made
// in [at, at+outage) after the first call fail with a retryable error. The
// first call is the job's time zero, as in the simulator. A call takes
// step, less how late it started: the dependency answers on a step clock,
// so the agents' own per-call overhead (the simulator counts none) does
// not pile up call after call.
type flakyDependency struct {
	step, at, outage time.Duration
	once             sync.Once
	t0               time.Time
	calls, failures  atomic.Int64
	mu               sync.Mutex
	drift            time.Duration // the farthest a call started from a multiple of step
	// misplaced counts the calls that started on the other side of an
	// outage edge than the multiple of step nearest to them, where the
	// simulator puts them: calls the machine stalled so long that timing
	// could change a count.
	misplaced int
}

func (d *flakyDependency) handle(ctx context.Context, _ *agent.Call) (any, error) {
	d.once.Do(func() { d.t0 = time.Now() })
	since := time.Since(d.t0)
	down := since >= d.at && since < d.at+d.outage
	d.calls.Add(1)
	grid := since.Round(d.step)
	gridDown := grid >= d.at && grid < d.at+d.outage
	off := since - grid
	d.mu.Lock()
	d.drift = max(d.drift, off, -off)
	if down != gridDown {
		d.misplaced++
	}
	d.mu.Unlock()
	t := time.NewTimer(time.Until(d.t0.Add(since.Round(d.step) + d.step)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if down {
		d.failures.Add(1)
		return nil, errors.New("503 Service Unavailable")
	}
	return "ok", nil
}

// agreementCase is one job run both ways.
type agreementCase struct {
	name        string
	items       int
	retryConfig string
	budget      int
	at, outage  time.Duration
}

// The simulator reproduces a real fleet: the same job runs on an embedded
// server with a coordinator and two agents against a dependency that fails
// during a window, and `fleetctl simulate --json` with the same parameters
// predicts its calls, retries, dead letters and budget use within 5%.
//
// The runs are scaled to take about five seconds (in parallel) and chosen
// so that scheduling noise cannot move a count: the 20 slots call in
// lockstep every 500ms, and every outage edge falls 250ms away from the
// nearest call the simulator predicts — far more than the drift of a
// loaded machine under -race (a few ms, at worst tens, per call).
func TestSimulateAgreesWithAFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet for seconds")
	}
	t.Parallel()
	const (
		agents      = 2
		concurrency = 10
		step        = 500 * time.Millisecond
	)
	cases := []agreementCase{
		{
			// A backlog: the queue is full when the dependency goes down at
			// 1.25s (calls start at 0, 0.5, 1s, ...) and stays down. The
			// 60 items called before then succeed; the budget of 30 runs out
			// at the outage's first failures, and every other item is
			// dead-lettered.
			name: "backlog", items: 150, budget: 30, at: 1250 * time.Millisecond, outage: time.Hour,
			retryConfig: "{attempts: 4, backoff: fixed, initial_delay: 500ms}",
		},
		{
			// Retries across the recovery: 20 items on 20 slots, down from
			// the start until 3.75s, retried 1s after a failure: each fails
			// at 0, 1.5 and 3s and recovers at 4.5s — if the budget of 50
			// lets it: 20 + 20 units go to the first two rounds, 10 to the
			// third. (An agent that pulled more than it has free slots may
			// start a retry one call, 500ms, later: still on the same side.)
			name: "recovery", items: 20, budget: 50, at: 0, outage: 3750 * time.Millisecond,
			retryConfig: "{attempts: 4, backoff: fixed, initial_delay: 1s}",
		},
		{
			// A backlog through an outage from 1.25s to 2.75s: the 60 calls
			// at 1.5, 2 and 2.5s fail, and their retries compete with the
			// queue and the agents' buffers; all recover after 2.75s, some
			// after failing twice.
			name: "backlog-recovery", items: 150, budget: 1000, at: 1250 * time.Millisecond, outage: 1500 * time.Millisecond,
			retryConfig: "{attempts: 3, backoff: fixed, initial_delay: 500ms}",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: three fleets at once on a 2-core machine running
			// the rest of the suite stalled calls across the outage edges.
			path := agreementSpec(t, tc)
			code, out, errOut := cli(t, "", "simulate", path, "--json",
				"--agents", fmt.Sprint(agents), "--concurrency", fmt.Sprint(concurrency),
				"--step-duration", step.String(), "--at", tc.at.String(), "--outage", tc.outage.String(), "--error-rate", "1")
			require.Equal(t, exitOK, code, errOut)
			var rep struct {
				Runs []struct {
					Result agreementCounts `json:"result"`
				} `json:"runs"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			sim := rep.Runs[0].Result

			// The counts cannot depend on timing while every call starts on
			// the same side of the outage edges as the point of the 500ms
			// grid nearest to it (the edges are 250ms from the grid). A
			// machine that stalled a call past an edge — by seconds, under
			// a full -race suite beside other builds — gets the run
			// repeated, up to three times.
			var live agreementCounts
			var drift time.Duration
			for attempt := 1; attempt <= 3; attempt++ {
				var misplaced int
				live, drift, misplaced = runAgreementFleet(t, path, tc, step, agents, concurrency)
				if misplaced == 0 {
					break
				}
				t.Logf("attempt %d: %d call(s) stalled across an outage edge (up to %s off the grid); running again", attempt, misplaced, drift)
			}
			t.Logf("live: %+v (the farthest call %s off the grid)", live, drift)
			t.Logf("sim:  %+v", sim)
			within5 := func(what string, got, want int64) {
				t.Helper()
				require.LessOrEqual(t, math.Abs(float64(got-want)), 0.05*float64(want),
					"%s: live %d, simulated %d (the farthest call %s off the grid)", what, got, want, drift)
			}
			within5("calls", live.Attempts, sim.Attempts)
			within5("failed calls", live.Failures, sim.Failures)
			within5("retries", live.Retries, sim.Retries)
			within5("budget consumed", live.Budget.Consumed, sim.Budget.Consumed)
			within5("dead letters", live.DeadLettered, sim.DeadLettered)
			within5("succeeded", live.Succeeded, sim.Succeeded)
		})
	}
}

// agreementCounts are what the agreement test compares, as `fleetctl
// simulate --json` names them.
type agreementCounts struct {
	Attempts     int64 `json:"attempts"`
	Failures     int64 `json:"failures"`
	Retries      int64 `json:"retries"`
	DeadLettered int64 `json:"dead_lettered"`
	Succeeded    int64 `json:"succeeded"`
	Budget       struct {
		Consumed int64 `json:"consumed"`
	} `json:"budget"`
}

func agreementSpec(t *testing.T, tc agreementCase) string {
	items := make([]string, tc.items)
	for i := range items {
		items[i] = fmt.Sprintf("{id: i%03d}", i)
	}
	body := fmt.Sprintf(`id: agree-%s
items: [%s]
agent_template:
  - handler: dependency
    retry_config: %s
retry_budget: %d
`, tc.name, strings.Join(items, ", "), tc.retryConfig, tc.budget)
	p := filepath.Join(t.TempDir(), "job.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// runAgreementFleet runs the job at path on a new embedded server with a
// coordinator and the agents, against a new flaky dependency, and returns
// its counts, how far off the grid of calls its calls started, and how
// many were stalled across an outage edge. The budget consumed is read
// from its KV record, the ground truth.
func runAgreementFleet(t *testing.T, path string, tc agreementCase, step time.Duration, agents, concurrency int) (agreementCounts, time.Duration, int) {
	dep := &flakyDependency{step: step, at: tc.at, outage: tc.outage}
	srv := fleettest.RunServer(t)
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	prov := provision.Config{DLQMaxBytes: 64 << 20} // MaxDeliver, MaxAckPending: the defaults, as simulated
	coord, err := coordinator.New(srv.Connect(t), coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	wg.Go(func() { _ = coord.Run(ctx) })
	<-coord.Ready()
	for i := range agents {
		a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("agent-%d", i), Concurrency: concurrency}, testhooks.Agent{Provision: prov})).
			Handle("dependency", dep.handle)
		wg.Go(func() { _ = a.Run(ctx) })
	}
	// Every agent pulls before the job arrives, as the simulated fleet
	// starts with all its slots free.
	names := messages.MustNames(messages.DefaultPrefix)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		c, err := srv.JS().Consumer(ctx, names.WorkStream(), names.AgentsConsumer(messages.DefaultPool))
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting < agents {
			return fmt.Errorf("%d of %d agents pulling", info.NumWaiting, agents)
		}
		return nil
	})

	code, out, errOut := cli(t, srv.URL(), "submit", path, "--wait", "--json")
	require.Contains(t, []int{exitOK, exitFailed}, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, st.Items, st.Succeeded+st.DeadLettered+st.Skipped+st.NotRun+st.Failed)

	kv, err := srv.JS().KeyValue(ctx, names.BudgetBucket())
	require.NoError(t, err)
	e, err := kv.Get(ctx, budget.Key(st.Pool, st.ID))
	require.NoError(t, err)
	var rec budget.Record
	require.NoError(t, json.Unmarshal(e.Value(), &rec))

	live := agreementCounts{
		Attempts: dep.calls.Load(), Failures: dep.failures.Load(), Retries: st.Retries,
		DeadLettered: st.DeadLettered, Succeeded: st.Succeeded,
	}
	live.Budget.Consumed = int64(rec.Consumed)
	dep.mu.Lock()
	defer dep.mu.Unlock()
	return live, dep.drift, dep.misplaced
}

const simulateSpec = `
id: sim-cli
items: [{id: a}, {id: b}, {id: c}]
agent_template:
  - name: fetch
    shell: "true"
  - name: upload
    handler: upload
    retry_config: {attempts: 3, backoff: fixed, initial_delay: 1s}
retry_budget: 10
`

func TestSimulateCommand(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, simulateSpec)
	dir := t.TempDir()
	svg, png := filepath.Join(dir, "out.svg"), filepath.Join(dir, "out.png")

	code, out, errOut := cli(t, "", "simulate", path, "--step", "upload", "--outage", "1m", "--at", "0s",
		"--compare", "name=no retries; attempts=1", "--plot", svg)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `dependency: step 2 "upload" (handler upload): 100% of calls fail ("503 Service Unavailable") for 1m from 0s`)
	require.Contains(t, out, "retry:      fixed, initial 1s, max 30s, 3 attempts, no jitter")
	require.Contains(t, out, "budget:     10 retries for the job, at most 10 per item")
	require.Regexp(t, `calls to the dependency +9 +3\n`, out, "3 items × 3 attempts, and × 1")
	require.Regexp(t, `dead-lettered +3 +3\n`, out)
	require.Contains(t, out, "chart written to "+svg)
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), "<svg "), "an SVG document")
	require.Contains(t, string(data), "no retries")

	code, _, errOut = cli(t, "", "simulate", path, "--items", "1000", "--outage", "10s", "--at", "1s", "--plot", png)
	require.Equal(t, exitOK, code, errOut)
	data, err = os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), "\x89PNG"), "a PNG image")

	code, out, errOut = cli(t, "", "simulate", path, "--json", "--items", "100", "--agents", "2", "--outage", "5s",
		"--set", "max_parallel=10", "--compare", "retry_budget=0")
	require.Equal(t, exitOK, code, errOut)
	var rep struct {
		Job   string `json:"job"`
		Items int64  `json:"items"`
		Fleet struct {
			Agents      int `json:"agents"`
			Concurrency int `json:"concurrency"`
		} `json:"fleet"`
		Dependency struct {
			StepName string `json:"step_name"`
			OutageMS int64  `json:"outage_ms"`
		} `json:"dependency"`
		Runs []struct {
			Name      string            `json:"name"`
			Overrides map[string]string `json:"overrides"`
			Result    struct {
				Items    int64 `json:"items"`
				Attempts int64 `json:"attempts"`
				Retries  int64 `json:"retries"`
			} `json:"result"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "sim-cli", rep.Job)
	require.EqualValues(t, 100, rep.Items)
	require.Equal(t, 2, rep.Fleet.Agents)
	require.Equal(t, 8, rep.Fleet.Concurrency)
	require.Equal(t, "fetch", rep.Dependency.StepName, "the first step by default")
	require.EqualValues(t, 5000, rep.Dependency.OutageMS)
	require.Len(t, rep.Runs, 2)
	require.Equal(t, "baseline", rep.Runs[0].Name)
	require.Equal(t, map[string]string{"retry_budget": "0"}, rep.Runs[1].Overrides)
	require.Zero(t, rep.Runs[1].Result.Retries)
	require.EqualValues(t, 100, rep.Runs[1].Result.Attempts, "no retries: one call each")

	code, out, _ = cli(t, "", "simulate", "--keys")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "jitter: full, equal, decorrelated, proportional, or none")
}

// Bad input exits 2 and names the flag, or the field, at fault.
func TestSimulateBadInput(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, simulateSpec)
	remote := writeSpec(t, "input: objstore://inputs/items.json\nagent_template: [{handler: x}]\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no file", []string{}, "usage: fleetctl simulate"},
		{"bad spec", []string{writeSpec(t, "agent_template: [{handler: x, timeout: soon}]\nitems: [1]\n")}, "agent_template[0].timeout"},
		{"error rate", []string{path, "--error-rate", "1.5"}, "--error-rate (dependency.error_rate): must be in [0, 1], got 1.5"},
		{"agents", []string{path, "--agents", "-2"}, "--agents (fleet.agents): must be >= 1, got -2"},
		{"zero agents", []string{path, "--agents", "0"}, "--agents: must be >= 1, got 0"},
		{"zero step", []string{path, "--step-duration", "0s"}, "--step-duration: must be greater than 0, got 0"},
		{"duration", []string{path, "--outage", "two minutes"}, `invalid value "two minutes" for flag -outage`},
		{"step", []string{path, "--step", "nope"}, `--step "nope": no such step in agent_template (steps: fetch, upload)`},
		{"step number", []string{path, "--step", "3"}, "--step 3: the job has 2 step(s)"},
		{"retry-after on a shell step", []string{path, "--retry-after", "5s"}, "--retry-after (dependency.retry_after): step 0 is a shell step"},
		{"variant key", []string{path, "--compare", "jiter=full"}, `unknown key "jiter"`},
		{"variant value", []string{path, "--compare", "jitter=fulll"}, `agent_template[0].retry_config.jitter_mode: unknown jitter mode "fulll"`},
		{"set value", []string{path, "--set", "retry_budget=-1"}, "--set[1]"},
		{"plot format", []string{path, "--plot", "out.gif"}, `--plot "out.gif": want a .svg or .png file`},
		{"object store input", []string{remote}, "give their number with --items N"},
		{"operator setting", []string{path, "--retry-budget-max", "lots"}, "invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := cli(t, "", append([]string{"simulate"}, tt.args...)...)
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, tt.want)
		})
	}
}
