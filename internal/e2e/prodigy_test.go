package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// 003's configuration example ("Workflow-Level Retry (error_policy)":
// on_item_failure: dlq with retry_config max_attempts: 3, exponential),
// pasted as written in Prodigy's layout, run on a server with 20 items of
// which 5 always fail. Its durations are scaled down 100 times, as the seed
// timelines are (the item retries' 1s and 2s, the breaker's 30s). Its
// command has no retry_config, so each run of it is one attempt, as in
// Prodigy: each failing item runs exactly 3 times in total (the workflow's
// max_attempts), then is dead-lettered; the status counts the re-runs, and
// each DLQ entry holds the 3 attempts, each with its item run.
func TestSeed003WorkflowRetryConfig(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "pkg", "jobspec", "testdata", "seeds", "003-workflow-level-configuration.yaml"))
	require.NoError(t, err)
	spec, err := jobspec.Parse(data)
	require.NoError(t, err)
	ms := func(n int) *messages.Duration { d := messages.Duration(time.Duration(n) * time.Millisecond); return &d }
	spec.ID = "seed-003"
	require.Equal(t, 1, *spec.AgentTemplate[0].RetryConfig.Attempts, "no retry_config: the command runs once")
	wrc := spec.ErrorPolicy.RetryConfig
	wrc.InitialDelay, wrc.MaxDelay = ms(10), ms(300)
	spec.ErrorPolicy.CircuitBreaker.Timeout = *ms(300)

	// items.json, as the example's map.input names it, and the `process`
	// command its step runs, which records each run and fails for bad-*.
	dir, bin, runs := t.TempDir(), t.TempDir(), t.TempDir()
	var items []map[string]string
	for i := 1; i <= 20; i++ {
		id := fmt.Sprintf("item-%02d", i)
		if i%4 == 0 {
			id = fmt.Sprintf("bad-%02d", i)
		}
		items = append(items, map[string]string{"id": id})
	}
	in, err := json.Marshal(map[string]any{"items": items})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "items.json"), in, 0o600))
	script := fmt.Sprintf("#!/bin/sh\necho run >> %q/\"$1\"\ncase \"$1\" in bad-*) echo \"process $1: broken\" >&2; exit 1;; esac\n", runs)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "process"), []byte(script), 0o700))
	environ := func() []string {
		env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		return env
	}

	srv := fleettest.RunServer(t)
	// Each failing item spends 2 retries (its 2 re-runs), within the
	// default job budget.
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), InputDir: dir})
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 16, Environ: environ}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	id := submit(t, cl, string(body))
	st := waitJob(t, cl, id, 120*time.Second)

	require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason, "neither max_failures (10) nor failure_threshold (0.25, not exceeded by 5 of 20) stopped it")
	require.EqualValues(t, 15, st.Succeeded)
	require.EqualValues(t, 5, st.DeadLettered)
	require.EqualValues(t, 10, st.ItemRetries, "2 re-runs of each failing item")
	require.EqualValues(t, 10, st.Retries, "the 10 re-runs, and no step retries")

	for _, it := range items {
		got, err := os.ReadFile(filepath.Join(runs, it["id"]))
		require.NoError(t, err)
		want := 1
		if strings.HasPrefix(it["id"], "bad-") {
			want = 3 // 3 whole-item runs of 1 attempt
		}
		require.Equal(t, want, strings.Count(string(got), "run"), it["id"])
	}

	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, 5)
	for _, ref := range entries {
		e := ref.Entry
		require.Equal(t, messages.ReasonItemRetryExhausted, e.Reason, e.ItemID)
		require.Equal(t, 3, e.ItemRuns, e.ItemID)
		var runsOf, decisions []string
		for _, a := range e.Attempts {
			runsOf = append(runsOf, fmt.Sprint(a.ItemRun))
			decisions = append(decisions, a.Decision)
		}
		require.Equal(t, "1 2 3", strings.Join(runsOf, " "), e.ItemID)
		require.Equal(t, "item_retry item_retry give_up", strings.Join(decisions, " "), e.ItemID)
	}
}

// AD-44's submission (its Part 5, JobSubmission) in its own field names,
// through the API as JSON: the job runs with the budget and the
// best-effort settings they name. The item of dc-east always fails; its
// per-workflow cap of 2 ends its retries, inside the job budget of 4.
func TestAD44Submission(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	errDown := errors.New("dc-east unreachable")
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 4}, testhooks.Agent{Provision: calmProvision}), map[string]agent.HandlerFunc{
		"dispatch": func(_ context.Context, c *agent.Call) (any, error) {
			if c.Group == "dc-east" {
				return nil, errDown
			}
			return "ok", nil
		},
	})
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "ad44-submission", "group_by": "${item.dc}",
		"items": [{"id": "e1", "dc": "dc-east"}, {"id": "w1", "dc": "dc-west"}, {"id": "w2", "dc": "dc-west"}],
		"agent_template": [{"handler": "dispatch", "retry_config": {"attempts": 10, "initial_delay": "10ms", "max_delay": "10ms"}}],
		"retry_budget": 4, "retry_budget_per_workflow": 2,
		"best_effort": true, "best_effort_min_dcs": 2, "best_effort_deadline_seconds": 30}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, 4, st.Budget.Total, "retry_budget")
	require.Equal(t, 2, st.Budget.PerItemMax, "retry_budget_per_workflow")
	require.EqualValues(t, 2, st.Retries)
	require.EqualValues(t, 2, st.Succeeded)
	require.EqualValues(t, 1, st.DeadLettered)
	be := st.BestEffort
	require.NotNil(t, be, "best_effort: true")
	require.Equal(t, 2, be.MinGroups, "best_effort_min_dcs")
	require.Equal(t, 2, be.Groups)
	require.Equal(t, messages.Duration(30*time.Second), be.DeadlineAfter, "best_effort_deadline_seconds")
	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, 1)
	require.Equal(t, messages.ReasonItemBudget, entries[0].Entry.Reason)
}
