package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Screenshots of the browser test: docs/ui.md shows them. The test writes
// them to docs/ui when JETFLEET_UPDATE_SCREENSHOTS=1 (scripts/ui-test.sh
// --update), else to a temporary directory.
const (
	screenshotDir = "../../docs/ui"
	updateEnv     = "JETFLEET_UPDATE_SCREENSHOTS"
	chromeEnv     = "JETFLEET_CHROME"
)

// findChrome returns a Chromium or Chrome binary: $JETFLEET_CHROME, or the
// first of the usual names on PATH.
func findChrome() string {
	if p := os.Getenv(chromeEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The dashboard in a real browser: the jobs, a job, its dead letters (an
// item whose id is a script tag among them) and an entry render; a replay
// started from the page reopens the job, which then finishes; no page
// throws or breaks its Content-Security-Policy; the screenshots docs/ui.md
// shows are taken on the way.
func TestDashboardInABrowser(t *testing.T) {
	chrome := findChrome()
	if chrome == "" {
		t.Skip("no Chromium or Chrome found: install Debian's chromium (apt-get install -y chromium; scripts/ui-test.sh does it) or set " + chromeEnv)
	}
	if testing.Short() {
		t.Skip("the browser test is not short")
	}
	shots := t.TempDir()
	if os.Getenv(updateEnv) == "1" {
		shots = screenshotDir
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}

	f := startFleet(t, Config{FlushInterval: 100 * time.Millisecond})
	f.broken.set("img-007", "img-023", hostile)
	f.runJob(t, `{"id": "thumbnails", "name": "make thumbnails", "items": `+itemList(25, "")+`,
		"agent_template": [{"handler": "noop"}]}`)
	st := f.runJob(t, `{"id": "nightly-resize", "name": "resize the night's uploads", "retry_budget": 200,
		"items": `+itemList(40, hostile)+`,
		"error_policy": {"circuit_breaker": {"failure_threshold": 100, "success_threshold": 1, "timeout": "30s", "half_open_requests": 1}},
		"agent_template": [
			{"handler": "flaky", "with": {"fail_rate": 0.35, "seed": 3, "message": "connection refused by image store"},
			 "retry_config": {"attempts": 10, "backoff": "exponential", "initial_delay": "5ms", "max_delay": "40ms", "jitter": false}},
			{"handler": "maybe"}]}`)
	require.Equal(t, messages.StateFailed, st.State, "%+v", st)
	require.EqualValues(t, 3, st.DeadLettered, "%+v", st)
	require.Positive(t, st.Retries)
	_, err := f.client.JobSubmit(t.Context(), []byte(`{"id": "reindex", "name": "rebuild the search index", "items": `+itemList(400, "")+`,
		"max_parallel": 3, "agent_template": [{"handler": "sleep", "with": {"duration": "200ms"}}]}`))
	require.NoError(t, err)
	f.waitState(t, "reindex", messages.StateRunning)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("hide-scrollbars", true))...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	// Start the browser, then listen: every console message and dialog.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	var (
		mu       sync.Mutex
		problems []string
	)
	consoleCtx, stopConsole := context.WithCancel(ctx)
	defer stopConsole()
	messagesIter := chromedp.Console(consoleCtx)
	dialogs := chromedp.Events(consoleCtx, cdppage.JavascriptDialogOpening)
	var listeners sync.WaitGroup
	listeners.Add(2)
	go func() {
		defer listeners.Done()
		for m, err := range messagesIter {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer listeners.Done()
		for d, err := range dialogs {
			if err != nil {
				return
			}
			if d.Type == cdppage.DialogTypeAlert {
				mu.Lock()
				problems = append(problems, "an alert opened: "+d.Message)
				mu.Unlock()
			}
		}
	}()

	// must runs steps or fails the test.
	must := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// text reads an element's text in one evaluation, so that a live
	// update replacing the element meanwhile cannot leave a stale node.
	text := func(sel string) string {
		t.Helper()
		q, _ := json.Marshal(sel)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(`+string(q)+`) || {}).innerText || ""`))
		require.NoError(t, err, sel)
		return s
	}
	shot := func(name string) {
		t.Helper()
		img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err, "screenshot %s", name)
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), img, 0o644))
	}

	// The jobs, live.
	must("jobs page", chromedp.Navigate(f.ui.LoginURL(f.base)), // logs in; redirected to / without the token
		chromedp.WaitVisible(chromedp.CSS(`tr[data-job="nightly-resize"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	row := text(`tr[data-job="nightly-resize"]`)
	require.Contains(t, row, "failed")
	require.Contains(t, row, "all_completed")
	require.Contains(t, text(`tr[data-job="reindex"]`), "running")
	// Live progress: the running job's count moves without a reload.
	before := text(`tr[data-job="reindex"] [data-field="progress"]`)
	_, err = chromedp.Run(ctx, chromedp.PollFunction[bool](`(before) => document.querySelector('tr[data-job="reindex"] [data-field="progress"]').textContent !== before`,
		chromedp.WithPollingArgs(before), chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the running job's progress moves on the page without a reload")
	shot("jobs")

	// One job.
	must("job page", chromedp.Navigate(f.base+"/jobs/nightly-resize"), chromedp.WaitVisible(chromedp.CSS(`#errors`)))
	errs := text(`#errors`)
	require.Contains(t, errs, "disk full")
	require.Contains(t, errs, hostile, "the example item, shown as text")
	require.Contains(t, text(`#job [data-field="state"]`), "failed")
	shot("job")

	// Its dead letters.
	must("dlq page", chromedp.Navigate(f.base+"/dlq?job=nightly-resize"), chromedp.WaitVisible(chromedp.CSS(`#entries`)))
	entries := text(`#entries tbody`)
	for _, id := range []string{"img-007", "img-023", hostile} {
		require.Contains(t, entries, id)
	}
	require.Contains(t, entries, "disk full: <img src=x onerror=alert(1)>", "the error, as text")
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#entries tbody tr[data-seq]').length`))
	require.NoError(t, err)
	require.Equal(t, 3, rows)
	shot("dlq")

	// An entry and its attempt timeline: the hostile one.
	must("entry page", chromedp.Click(chromedp.CSS(`#entries tbody tr:nth-child(2) td a`)), chromedp.WaitVisible(chromedp.CSS(`#attempts`)))
	require.NotEmpty(t, text(`#item-id`))
	must("hostile entry", chromedp.Navigate(f.base+"/dlq?job=nightly-resize&text=script"),
		chromedp.WaitVisible(chromedp.CSS(`#entries tbody tr[data-seq] td a`)),
		chromedp.Click(chromedp.CSS(`#entries tbody tr[data-seq] td a`)), chromedp.WaitVisible(chromedp.CSS(`#payload`)))
	require.Equal(t, hostile, text(`#item-id`))
	shot("entry")

	// Fix the cause, dry-run, then replay from the page, paced.
	f.broken.set()
	must("dry run", chromedp.Navigate(f.base+"/dlq?job=nightly-resize"), chromedp.WaitVisible(chromedp.CSS(`#replay-dry-run`)),
		chromedp.Click(chromedp.CSS(`#replay-dry-run`)), chromedp.WaitVisible(chromedp.CSS(`#plan-matched`)))
	require.Equal(t, "3", text(`#plan-matched`))
	require.EqualValues(t, 3, f.mustStatus(t, "nightly-resize").DeadLettered, "a dry run changes nothing")
	must("replay", chromedp.SetValue(chromedp.CSS(`input[name="rate"]`), "1"),
		chromedp.Click(chromedp.CSS(`#replay-start`)), chromedp.WaitVisible(chromedp.CSS(`#replay-progress`)))
	shot("replay")

	// The job reopens (running again), then finishes, as its page shows.
	must("job page after the replay", chromedp.Navigate(f.base+"/jobs/nightly-resize"), chromedp.WaitVisible(chromedp.CSS(`#job`)))
	var seen []string
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#job [data-field="state"]') || {}).textContent || ""`))
		if err == nil && s != "" && (len(seen) == 0 || seen[len(seen)-1] != s) {
			seen = append(seen, s)
		}
		if len(seen) > 0 && seen[len(seen)-1] == messages.StateSucceeded {
			break
		}
		must("wait", chromedp.Sleep(100*time.Millisecond))
	}
	require.Contains(t, seen, messages.StateRunning, "the job reopened: %v", seen)
	require.Equal(t, messages.StateSucceeded, seen[len(seen)-1], "the job finished: %v", seen)
	final := f.mustStatus(t, "nightly-resize")
	require.EqualValues(t, 41, final.Succeeded)
	require.Zero(t, final.DeadLettered)
	must("final job page", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#job`)))
	require.Contains(t, text(`#job [data-field="state"]`), "succeeded")
	shot("job-replayed")

	// The agents.
	must("agents page", chromedp.Navigate(f.base+"/agents"), chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="agent-0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="agent-1"]`)))
	require.Contains(t, text(`#agents`), "agent-1")
	shot("agents")

	stopConsole()
	listeners.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, problems, "the pages threw, broke their CSP or opened a dialog")
}

// itemList is n items img-000… as JSON, plus one with id extra when set.
func itemList(n int, extra string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id": "img-%03d", "path": "/uploads/%03d.jpg"}`, i, i)
	}
	if extra != "" {
		fmt.Fprintf(&b, `, {"id": %q, "path": "</pre><script>alert('payload')</script>"}`, extra)
	}
	b.WriteByte(']')
	return b.String()
}
