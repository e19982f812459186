package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/seedcases"
)

// runBackoff runs fleetctl in-process with a config file holding doc.
func runBackoffCLI(t *testing.T, doc string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "retry.yaml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	var out, errb bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	full := append([]string{"backoff", "plan", "--config", path}, args...)
	code = runCLI(context.Background(), env, full)
	return code, out.String(), errb.String()
}

func TestBackoffPlanJSONTimelines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{
			name: "exponential 1s base 2",
			doc:  "attempts: 6\nbackoff: {exponential: {base: 2}}\ninitial_delay: 1s\n",
			want: `{"delays_ms":[1000,2000,4000,8000,16000],"total_delay_ms":31000,"retries":5,"stopped_by":"attempts"}`,
		},
		{
			name: "exponential capped at max_delay",
			doc:  "attempts: 7\nbackoff: exponential\ninitial_delay: 1s\nmax_delay: 10s\n",
			want: `{"delays_ms":[1000,2000,4000,8000,10000,10000],"total_delay_ms":35000,"retries":6,"stopped_by":"attempts"}`,
		},
		{
			name: "fibonacci",
			doc:  "attempts: 7\nbackoff: fibonacci\ninitial_delay: 1s\n",
			want: `{"delays_ms":[1000,1000,2000,3000,5000,8000],"total_delay_ms":20000,"retries":6,"stopped_by":"attempts"}`,
		},
		{
			name: "linear 1s + 2s",
			doc:  "attempts: 5\ninitial_delay: 1s\nbackoff:\n  linear:\n    increment: 2s\n",
			want: `{"delays_ms":[1000,3000,5000,7000],"total_delay_ms":16000,"retries":4,"stopped_by":"attempts"}`,
		},
		{
			name: "custom then max_delay",
			doc: "attempts: 6\nmax_delay: 60s\nbackoff:\n  custom:\n    delays:\n" +
				"      - {secs: 1, nanos: 0}\n      - {secs: 3, nanos: 0}\n      - 7s\n      - 15s\n",
			want: `{"delays_ms":[1000,3000,7000,15000,60000],"total_delay_ms":86000,"retries":5,"stopped_by":"attempts"}`,
		},
		{
			name: "fixed 5s attempts 3",
			doc:  "attempts: 3\nretry_budget: 10m\nbackoff: fixed\ninitial_delay: 5s\n",
			want: `{"delays_ms":[5000,5000],"total_delay_ms":10000,"retries":2,"stopped_by":"attempts"}`,
		},
		{
			name: "5s retry budget",
			doc:  "attempts: 10\nretry_budget: 5s\nbackoff: {exponential: {base: 2}}\ninitial_delay: 1s\n",
			want: `{"delays_ms":[1000,2000],"total_delay_ms":3000,"retries":2,"stopped_by":"retry_budget"}`,
		},
		{
			name: "JSON document, jitter ignored without --seed",
			doc:  `{"attempts": 4, "backoff": "exponential", "jitter": true, "jitter_factor": 0.5}`,
			want: `{"delays_ms":[1000,2000,4000],"total_delay_ms":7000,"retries":3,"stopped_by":"attempts"}`,
		},
		{
			name: "wrapped in retry_config",
			doc:  "retry_config:\n  attempts: 2\n  backoff: fixed\n  initial_delay: 500ms\n",
			want: `{"delays_ms":[500],"total_delay_ms":500,"retries":1,"stopped_by":"attempts"}`,
		},
		{
			name: "single attempt",
			doc:  "attempts: 1\n",
			want: `{"delays_ms":[],"total_delay_ms":0,"retries":0,"stopped_by":"attempts"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runBackoffCLI(t, tt.doc, "--json")
			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, tt.want+"\n", stdout)
		})
	}
}

func TestBackoffPlanSeededJitter(t *testing.T) {
	t.Parallel()
	doc := "attempts: 6\njitter: true\njitter_factor: 0.3\n"
	code, a, _ := runBackoffCLI(t, doc, "--json", "--seed", "42")
	require.Equal(t, exitOK, code)
	_, b, _ := runBackoffCLI(t, doc, "--json", "--seed", "42")
	require.Equal(t, a, b, "same seed, same output")
	_, c, _ := runBackoffCLI(t, doc, "--json", "--seed", "43")
	require.NotEqual(t, a, c)

	var got backoffPlanJSON
	require.NoError(t, json.Unmarshal([]byte(a), &got))
	require.Equal(t, 5, got.Retries)
	var sum int64
	for i, ms := range got.DelaysMS {
		base := int64(1000) << i
		require.GreaterOrEqual(t, ms, base*7/10, "retry %d", i+1)
		require.LessOrEqual(t, ms, base*13/10, "retry %d", i+1)
		sum += ms
	}
	require.Equal(t, sum, got.TotalDelayMS)
	require.NotEqual(t, []int64{1000, 2000, 4000, 8000, 16000}, got.DelaysMS)
}

func TestBackoffPlanTable(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBackoffCLI(t, "attempts: 10\nretry_budget: 5s\ninitial_delay: 1s\n")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "policy:  exponential base 2, initial 1s, max 30s, 10 attempts, no jitter, retry budget 5s")
	lines := strings.Split(stdout, "\n")
	require.Contains(t, lines, "    1            1s            1s  "+strings.Repeat("█", 20))
	require.Contains(t, lines, "    2            2s            3s  "+strings.Repeat("█", 40))
	require.Contains(t, stdout, "retries: 2, total delay 3s")
	require.Contains(t, stdout, "stopped by: retry_budget (5s): retry 3 would wait 4s, taking the total to 7s > 5s")

	code, stdout, _ = runBackoffCLI(t, "attempts: 3\nbackoff: fixed\ninitial_delay: 5s\njitter: true\n")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "jitter:  not applied (pass --seed N to apply it)")
	require.Contains(t, stdout, "stopped by: attempts (3 = the first run + 2 retries)")

	// Long plans are elided in the middle.
	code, stdout, _ = runBackoffCLI(t, "attempts: 100\nbackoff: fixed\n")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "(74 more)")
	require.Contains(t, stdout, "\n   99 ")
	require.NotContains(t, stdout, "\n   50 ")
}

func TestBackoffPlanBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		doc    string
		args   []string
		stderr []string
	}{
		{"field paths from the parser", "attempts: 0\nbackoff: {exponential: {base: -1}}\nretry_on: [network, {pattern: \"a(\"}]\n", nil,
			[]string{"attempts (line 1): must be", "backoff.exponential.base (line 2):", "retry_on[1].pattern (line 3): invalid regex"}},
		{"JSON field paths", `{"attempts": 3, "jitter_factor": 2}`, nil, []string{"jitter_factor: must be between 0 and 1"}},
		{"unknown field", "attempts: 3\nretries: 5\n", nil, []string{"retries"}},
		{"bad duration", "initial_delay: 5 seconds\n", nil, []string{"initial_delay"}},
		{"not YAML", "attempts: [\n", nil, []string{"invalid retry config"}},
		{"bad seed", "attempts: 2\n", []string{"--seed", "x"}, []string{"invalid value"}},
		{"extra argument", "attempts: 2\n", []string{"extra"}, []string{"usage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runBackoffCLI(t, tt.doc, tt.args...)
			require.Equal(t, exitUsage, code)
			require.Empty(t, stdout)
			for _, s := range tt.stderr {
				require.Contains(t, stderr, s)
			}
		})
	}
}

func TestBackoffUsage(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, args)
		return code, out.String(), errb.String()
	}
	code, _, stderr := run("backoff")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "backoff plan --config FILE")
	code, _, _ = run("backoff", "simulate")
	require.Equal(t, exitUsage, code)
	code, _, _ = run("backoff", "plan")
	require.Equal(t, exitUsage, code, "--config is required")
	code, _, _ = run("backoff", "plan", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, exitUsage, code)
	code, stdout, _ := run("backoff", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "backoff plan")
	code, _, _ = run("backoff", "plan", "-h")
	require.Equal(t, exitOK, code)
}

// initial_delay: 1m with the default max_delay is capped, not refused: the
// plan retries every 30s and says why.
func TestBackoffPlanCapsInitialDelay(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBackoffCLI(t, "attempts: 4\ninitial_delay: 1m\n", "--json")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, `{"delays_ms":[30000,30000,30000],"total_delay_ms":90000,"retries":3,"stopped_by":"attempts"}`+"\n", stdout)
	code, stdout, stderr = runBackoffCLI(t, "attempts: 4\nbackoff: fixed\ninitial_delay: 1m\n")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "warning: initial delay 1m is greater than max_delay 30s: every delay is capped at 30s\n")
	require.Contains(t, stdout, "retries: 3, total delay 1m30s")
}

// `backoff plan --json` for every worked timeline of the source documents,
// with their run times and agent timeouts (internal/seedcases).
func TestBackoffPlanSeedTimelines(t *testing.T) {
	t.Parallel()
	for _, tl := range seedcases.Timelines() {
		t.Run(tl.Name(), func(t *testing.T) {
			args := []string{"--json"}
			if tl.RunTime > 0 {
				args = append(args, "--run-time", tl.RunTime.String())
			}
			if tl.AgentTimeout > 0 {
				args = append(args, "--agent-timeout", tl.AgentTimeout.String())
			}
			code, stdout, stderr := runBackoffCLI(t, tl.Config, args...)
			require.Equal(t, exitOK, code, stderr)
			var got backoffPlanJSON
			require.NoError(t, json.Unmarshal([]byte(stdout), &got))
			want := make([]int64, len(tl.Delays))
			var total int64
			for i, d := range tl.Delays {
				want[i] = d.Milliseconds()
				total += want[i]
			}
			require.Equal(t, want, got.DelaysMS)
			require.Equal(t, total, got.TotalDelayMS)
			require.Equal(t, len(tl.Delays), got.Retries)
			require.Equal(t, tl.StoppedBy, got.StoppedBy)
			require.Equal(t, tl.RunTime > 0 || tl.AgentTimeout > 0, got.ElapsedMS != nil)
		})
	}
}

// The source documents' agent timeout example, as backoff plan prints it:
// what the delays leave for the runs, and where runs of 40s end the item.
func TestBackoffPlanAgentTimeout(t *testing.T) {
	t.Parallel()
	doc := "attempts: 6\nbackoff: fibonacci\ninitial_delay: 10s\n"
	code, stdout, stderr := runBackoffCLI(t, doc, "--agent-timeout", "5m")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "the delays use 1m40s of the agent_timeout (5m), leaving 3m20s for the runs\n")
	require.Contains(t, stdout, "stopped by: attempts (6 = the first run + 5 retries)")
	code, stdout, stderr = runBackoffCLI(t, doc, "--agent-timeout", "5m", "--run-time", "40s")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "elapsed: 4m30s, runs included\n")
	require.Contains(t, stdout, "stopped by: agent_timeout (5m): retry 5 would come back at 5m, with the time up\n")
	code, stdout, _ = runBackoffCLI(t, doc, "--agent-timeout", "1m", "--run-time", "45s")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "stopped by: agent_timeout (1m): run 2 is cut at 1m\n")
	code, _, stderr = runBackoffCLI(t, doc, "--run-time", "-1s")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "must not be negative")
}
