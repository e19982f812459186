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

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/seedcases"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// seedScale shrinks the documents' timelines (seconds to minutes) to run
// in a test: 1s becomes 10ms.
const seedScale = 100

// seedSlack bounds how late a redelivery may be on a loaded machine. The
// lower bound is exact: a delayed nak is never redelivered early.
const seedSlack = 2 * time.Second

// scaleConfig divides every duration of rc by seedScale, max_delay's
// default included, so that its plan is the document's, scaled.
func scaleConfig(rc *messages.RetryConfig) *messages.RetryConfig {
	sc := func(d messages.Duration) messages.Duration { return d / seedScale }
	scp := func(p **messages.Duration, def messages.Duration) {
		if *p == nil {
			if def == 0 {
				return
			}
			*p = &def
		}
		v := sc(**p)
		*p = &v
	}
	out := *rc
	scp(&out.InitialDelay, messages.DefaultInitialDelay)
	scp(&out.MaxDelay, messages.DefaultMaxDelay)
	scp(&out.RetryBudget, 0)
	if b := rc.Backoff; b != nil {
		nb := *b
		scp(&nb.Increment, 0)
		scp(&nb.Initial, 0)
		nb.Delays = nil
		for _, d := range b.Delays {
			nb.Delays = append(nb.Delays, sc(d))
		}
		out.Backoff = &nb
	}
	return &out
}

// runLog is what the timeline handler saw of one job's item: when each
// run began and when it failed.
type runLog struct {
	mu           sync.Mutex
	starts, ends map[string][]time.Time
}

// Every worked timeline of the source documents (internal/seedcases), live:
// one job per timeline, its durations scaled down 100 times, each run of its
// one item failing after the example's run time. Each redelivery comes
// after the failure before it by at least the planned delay (exactly: the
// server never redelivers a delayed nak early) and at most seedSlack more;
// the item runs once per planned retry plus once, and gives up for the
// planned reason. It runs alone (no t.Parallel): at this scale the
// agent_timeout cases leave a few hundred milliseconds between the plan and
// the timeout, which redeliveries slowed by other tests' CPU used up.
func TestSeedTimelinesLive(t *testing.T) {
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	logs := &runLog{starts: map[string][]time.Time{}, ends: map[string][]time.Time{}}
	runTimes := map[string]time.Duration{}
	timeline := func(ctx context.Context, c *agent.Call) (any, error) {
		logs.mu.Lock()
		logs.starts[c.JobID] = append(logs.starts[c.JobID], time.Now())
		run := runTimes[c.JobID]
		logs.mu.Unlock()
		if run > 0 {
			t := time.NewTimer(run) // the run's work
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		logs.mu.Lock()
		logs.ends[c.JobID] = append(logs.ends[c.JobID], time.Now())
		logs.mu.Unlock()
		return nil, errors.New("503 Service Unavailable")
	}
	cases := seedcases.Timelines()
	startAgent(t, srv.URL(), agent.Config{Name: "a1", Concurrency: 2 * len(cases)}, map[string]agent.HandlerFunc{"timeline": timeline})
	cl := client(t, srv)

	type planned struct {
		tl    seedcases.Timeline
		plan  retry.Plan
		jobID string
	}
	var all []planned
	for i, tl := range cases {
		rc, err := jobspec.ParseRetryConfig([]byte(tl.Config))
		require.NoError(t, err, tl.Name())
		scaled := scaleConfig(rc)
		p, err := retry.NewPolicy(scaled)
		require.NoError(t, err, tl.Name())
		plan := p.PlanWith(nil, retry.PlanOptions{RunTime: tl.RunTime / seedScale, AgentTimeout: tl.AgentTimeout / seedScale})
		want := make([]time.Duration, len(tl.Delays))
		for k, d := range tl.Delays {
			want[k] = d / seedScale
		}
		require.Equal(t, want, plan.Delays, "%s: the scaled plan is the document's, scaled", tl.Name())
		require.Equal(t, tl.StoppedBy, plan.StoppedBy, tl.Name())
		id := fmt.Sprintf("seed-%02d", i)
		logs.mu.Lock()
		runTimes[id] = tl.RunTime / seedScale
		logs.mu.Unlock()
		spec := messages.JobSpec{ID: id, Name: tl.Name(), Items: []json.RawMessage{json.RawMessage(`{"id": "x"}`)},
			AgentTimeout:  messages.Duration(tl.AgentTimeout / seedScale),
			AgentTemplate: []messages.Step{{Handler: "timeline", RetryConfig: scaled}},
			RetryBudget:   &messages.BudgetValue{Count: 1000}}
		data, err := json.Marshal(&spec)
		require.NoError(t, err)
		submit(t, cl, string(data))
		all = append(all, planned{tl: tl, plan: plan, jobID: id})
	}

	for _, c := range all {
		t.Run(c.tl.Name(), func(t *testing.T) {
			st := waitJob(t, cl, c.jobID, 60*time.Second)
			require.EqualValues(t, 1, st.DeadLettered)
			entries := readDLQ(t, srv, c.jobID)
			require.Len(t, entries, 1)
			require.Equal(t, c.tl.StoppedBy, entries[0].Reason)

			logs.mu.Lock()
			starts, ends := logs.starts[c.jobID], logs.ends[c.jobID]
			logs.mu.Unlock()
			require.Len(t, starts, len(c.plan.Delays)+1, "one run per retry, and the first")
			require.Len(t, ends, len(starts))
			for k, d := range c.plan.Delays {
				gap := starts[k+1].Sub(ends[k])
				require.GreaterOrEqual(t, gap, d, "retry %d: never before its delay", k+1)
				require.LessOrEqual(t, gap, d+seedSlack, "retry %d: planned %s", k+1, d)
			}
		})
	}
}
