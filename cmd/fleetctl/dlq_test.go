package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// dlqFleet is a server, a coordinator and two agents; it returns the URL
// and an API client.
func dlqFleet(t *testing.T) (string, *client.Client) {
	t.Helper()
	prov := provision.Config{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}
	f := fleettest.RunFleet(t, nil, fleettest.WithAgents(2), fleettest.WithConcurrency(8),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) {
			c.Provision, c.StatusInterval = coordinator.Provision(prov), 20*time.Millisecond
		}),
		fleettest.WithAgentConfig(func(i int, c *agent.Config) {
			c.Name = fmt.Sprintf("a%d", i)
			testhooks.UpdateAgent(c, func(h *testhooks.Agent) { h.Provision = prov })
		}))
	return f.Server.URL(), f.Client
}

func cliCtx(ctx context.Context, url string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "NATS_URL" {
			return url
		}
		return ""
	}}
	code = runCLI(ctx, env, args)
	return code, out.String(), errb.String()
}

// brokenJob submits a job whose shell step fails for the items with a
// marker file in the returned directory, and waits for it to end.
func brokenJob(t *testing.T, url, id string, n int, broken func(i int) bool) (dir string) {
	t.Helper()
	dir = t.TempDir()
	var items []string
	for i := range n {
		item := fmt.Sprintf("it-%03d", i)
		items = append(items, fmt.Sprintf("{id: %s}", item))
		if broken(i) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "broken-"+item), nil, 0o600))
		}
	}
	path := writeSpec(t, fmt.Sprintf(`
id: %s
retry_budget: 1000
items: [%s]
agent_template:
  - name: check
    shell: "test ! -e %s/broken-${item.id}"
    retry_config: {attempts: 2, backoff: fixed, initial_delay: 10ms}
`, id, strings.Join(items, ", "), dir))
	code, out, errOut := cli(t, url, "submit", path, "--wait", "--json")
	require.Equal(t, exitFailed, code, "a job with dead letters fails: %s", errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, messages.StateFailed, st.State)
	return dir
}

func fix(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "broken-*"))
	require.NoError(t, err)
	for _, f := range files {
		require.NoError(t, os.Remove(f))
	}
}

func listJSON(t *testing.T, url string, args ...string) []messages.DLQEntryRef {
	t.Helper()
	code, out, errOut := cli(t, url, append([]string{"dlq", "list", "--json"}, args...)...)
	require.Equal(t, exitOK, code, errOut)
	var page messages.DLQListReply
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	return page.Entries
}

// The DLQ runbook's case through the CLI: 30 of 200 items dead-lettered with
// their history, inspected with list/get/stats/export, then
// "fleetctl dlq replay --job J" after the fix: 200 succeeded, no entries.
func TestDLQReplayThroughTheCLI(t *testing.T) {
	t.Parallel()
	url, client := dlqFleet(t)
	const n, bad = 200, 30
	dir := brokenJob(t, url, "cli-thirty", n, func(i int) bool { return i%6 == 0 && i < 6*bad })

	entries := listJSON(t, url, "--job", "cli-thirty", "--limit", "0")
	require.Len(t, entries, bad)
	for _, r := range entries {
		require.Len(t, r.Entry.Attempts, 2, "full history of %s", r.Entry.ItemID)
		for _, a := range r.Entry.Attempts {
			require.NotNil(t, a.ExitCode)
			require.Equal(t, "check", a.StepName)
			require.NotEmpty(t, a.Agent)
			require.False(t, a.Time.IsZero())
		}
	}
	require.Len(t, listJSON(t, url, "--job", "cli-thirty", "--limit", "7"), 7)

	code, out, errOut := cli(t, url, "dlq", "list", "--job", "cli-thirty")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "SEQ")
	require.Contains(t, out, entries[0].Entry.ItemID)

	code, out, errOut = cli(t, url, "dlq", "get", fmt.Sprint(entries[0].Seq))
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "attempts (2):")
	require.Contains(t, out, "give_up")

	code, out, errOut = cli(t, url, "dlq", "stats", "--job", "cli-thirty", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.DLQStats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.EqualValues(t, bad, st.Total)
	require.Equal(t, map[string]int64{messages.ReasonAttempts: bad}, st.ByReason)
	code, out, _ = cli(t, url, "dlq", "stats")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "30 dead letters match")
	require.Contains(t, out, "by signature")

	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	code, _, errOut = cli(t, url, "dlq", "export", "--job", "cli-thirty", "--out", file)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "exported 30 entries")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(data)), "\n"), bad)

	// A dry run counts and changes nothing.
	code, out, errOut = cli(t, url, "dlq", "replay", "--job", "cli-thirty", "--dry-run")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "dry run: 30 entries would be replayed")
	require.Len(t, listJSON(t, url, "--job", "cli-thirty", "--limit", "0"), bad)
	// Prodigy's name: dlq retry JOB is dlq replay --job JOB.
	code, out, errOut = cli(t, url, "dlq", "retry", "cli-thirty", "--dry-run")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "dry run: 30 entries would be replayed")
	code, _, errOut = cli(t, url, "dlq", "retry", "cli-thirty", "--job", "other")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--job is not needed")
	code, _, _ = cli(t, url, "dlq", "retry")
	require.Equal(t, exitUsage, code)

	fix(t, dir)
	code, out, errOut = cli(t, url, "dlq", "replay", "--job", "cli-thirty")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "completed: 30 of 30 entries replayed")
	require.Contains(t, errOut, "replay ", "a progress line")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	final, err := client.JobWait(ctx, "cli-thirty", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, final.State, "%+v", final)
	require.EqualValues(t, n, final.Succeeded)
	require.Empty(t, listJSON(t, url, "--job", "cli-thirty"))
}

// Ctrl-C during a replay cancels it on the coordinator and prints the
// exact count; running the command again replays the rest. The replay runs
// at 1 entry a second, so that the 12 take 12 s and the Ctrl-C, sent once
// 2 are replayed, lands some 10 s before the end however loaded the
// machine (at 5/s, 2.4 s in all, a loaded run saw all 12 replayed first).
func TestDLQReplayCtrlCAndPurge(t *testing.T) {
	t.Parallel()
	url, client := dlqFleet(t)
	const n = 12
	dir := brokenJob(t, url, "cli-cancel", n, func(int) bool { return true })
	fix(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := cliCtx(ctx, url, "dlq", "replay", "--job", "cli-cancel", "--rate", "1")
		done <- result{code, out, errOut}
	}()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		rs, err := client.DLQReplays(context.Background(), "")
		if err != nil {
			return err
		}
		if len(rs) == 0 || rs[0].Replayed < 2 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	cancel() // Ctrl-C
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("fleetctl did not return after Ctrl-C")
	}
	require.Equal(t, exitFailed, r.code, "%s\n%s", r.out, r.err)
	require.Contains(t, r.out, "cancelled: ")
	var replayed int
	_, err := fmt.Sscanf(r.out[strings.Index(r.out, "cancelled: ")+len("cancelled: "):], "%d of 12", &replayed)
	require.NoError(t, err, r.out)
	require.GreaterOrEqual(t, replayed, 2)
	require.Less(t, replayed, n)
	require.Len(t, listJSON(t, url, "--job", "cli-cancel", "--limit", "0"), n-replayed, "the printed count is what left the DLQ")

	// Purge needs --yes; bad input is exit 2.
	code, _, errOut := cli(t, url, "dlq", "purge", "--job", "cli-cancel")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, fmt.Sprintf("%d match; run again with --yes", n-replayed))
	code, out, errOut := cli(t, url, "dlq", "purge", "--job", "cli-cancel", "--yes")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, fmt.Sprintf("purged %d entries", n-replayed))
	require.Empty(t, listJSON(t, url, "--job", "cli-cancel"))
}

func TestDLQBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq"}, "usage: fleetctl dlq"},
		{[]string{"dlq", "frob"}, `unknown command "frob"`},
		{[]string{"dlq", "list", "--since", "yesterday-ish"}, "--since"},
		{[]string{"dlq", "list", "--since", "1h", "--until", "2h"}, "--until"},
		{[]string{"dlq", "list", "--job", "a.b"}, "--job"},
		{[]string{"dlq", "get"}, "usage"},
		{[]string{"dlq", "get", "abc"}, "SEQ must be"},
		{[]string{"dlq", "replay", "--rate", "-2"}, "--rate"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := cli(t, "nats://127.0.0.1:1", tc.args...)
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, tc.want)
		})
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2026-02-01T10:00:00Z": time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC),
		"90m":                  now.Add(-90 * time.Minute),
		"2d":                   now.Add(-48 * time.Hour),
	} {
		got, err := parseWhen(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %v", in, got)
	}
	got, err := parseWhen("2026-02-01", now)
	require.NoError(t, err)
	require.Equal(t, 2026, got.Year())
	_, err = parseWhen("soon", now)
	require.Error(t, err)
}
