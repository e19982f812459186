package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// hostile is an item id and payload text an attacker might put in a job.
const hostile = `<script>alert("id")</script>`

// badJob is a job whose hostile item is dead-lettered until it is fixed.
func badJob(id string) string {
	return fmt.Sprintf(`{"id": %q, "items": [{"id": "ok-1"}, {"id": %q, "note": "</pre><script>alert('payload')</script>"}, {"id": "ok-2"}],
		"agent_template": [{"handler": "maybe"}]}`, id, hostile)
}

// noActiveContent checks a page for script or style the CSP would block
// and for unescaped hostile text.
func noActiveContent(t *testing.T, body string) {
	t.Helper()
	require.NotContains(t, body, "<script>alert", "hostile text is escaped")
	require.NotContains(t, body, "<img src=x", "hostile text is escaped")
	scripts := regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1)
	require.Equal(t, []string{`<script src="/static/app.js" defer>`}, scripts, "only the embedded script")
	// Text is escaped, so every "<" left starts a real tag.
	for _, tag := range regexp.MustCompile(`<[a-zA-Z][^>]*>`).FindAllString(body, -1) {
		require.NotRegexp(t, `(?i)\son[a-z]+=`, tag, "no inline event handlers")
		require.NotRegexp(t, `(?i)\sstyle=`, tag, "no inline styles")
		require.NotContains(t, tag, "javascript:", "no script URLs")
	}
}

func TestPagesShowJobsAndDeadLettersEscaped(t *testing.T) {
	f := startFleet(t, Config{})
	f.broken.set(hostile)
	st := f.runJob(t, badJob("escapes"))
	require.Equal(t, messages.StateFailed, st.State)
	require.EqualValues(t, 1, st.DeadLettered)
	b := f.browser(t)

	code, body, h := b.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/jobs/escapes"`)
	require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	noActiveContent(t, body)

	code, body, _ = b.get("/jobs/escapes")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "disk full: &lt;img src=x onerror=alert(1)&gt;")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;", "the example item of the error, escaped")
	require.NotContains(t, body, "Cancel job", "a finished job cannot be cancelled")
	noActiveContent(t, body)

	code, body, _ = b.get("/dlq?job=escapes")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;")
	require.Contains(t, body, "permanent")
	noActiveContent(t, body)
	seq := regexp.MustCompile(`href="/dlq/(\d+)"`).FindStringSubmatch(body)
	require.NotNil(t, seq)

	code, body, _ = b.get("/dlq/" + seq[1])
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `&lt;/pre&gt;&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;`, "the payload, escaped")
	require.Contains(t, body, `<svg class="chart timeline"`)
	noActiveContent(t, body)

	// Filters and pages that select nothing, and bad input.
	code, body, _ = b.get("/dlq?job=escapes&error_class=network")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No dead letters match these filters")
	code, body, _ = b.get("/dlq?since=soon")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "since")
	code, _, _ = b.get("/dlq/123456")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = b.get("/jobs/no-such-job")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = b.get("/jobs/bad%20id")
	require.Equal(t, http.StatusBadRequest, code)
	code, _, _ = b.get("/?limit=100000")
	require.Equal(t, http.StatusBadRequest, code)
}

func TestReplayFromThePageReopensTheJob(t *testing.T) {
	f := startFleet(t, Config{})
	f.broken.set("b")
	st := f.runJob(t, `{"id": "replayed", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "agent_template": [{"handler": "maybe"}]}`)
	require.Equal(t, messages.StateFailed, st.State)
	b := f.browser(t)
	_, body, _ := b.get("/dlq?job=replayed")
	token := csrf(t, body)

	// No token, a wrong one, another origin: refused.
	form := url.Values{"job": {"replayed"}, "dry_run": {"1"}}
	code, _, _ := b.post("/dlq/replay", form)
	require.Equal(t, http.StatusForbidden, code)
	form.Set("csrf", "forged")
	code, _, _ = b.post("/dlq/replay", form)
	require.Equal(t, http.StatusForbidden, code)
	form.Set("csrf", token)
	other := f.browser(t) // another session: the token is not its own
	code, _, _ = other.post("/dlq/replay", form)
	require.Equal(t, http.StatusForbidden, code)

	// A dry run changes nothing.
	code, body, _ = b.post("/dlq/replay", form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<b id="plan-matched">1</b>`)
	require.EqualValues(t, 1, f.mustStatus(t, "replayed").DeadLettered)

	// Fixed: the replay reopens the job, which then succeeds.
	f.broken.set()
	form.Del("dry_run")
	form.Set("rate", "50")
	code, _, loc := b.post("/dlq/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.True(t, strings.HasPrefix(loc, "/dlq/replays/replay-"), loc)
	final := f.waitState(t, "replayed", messages.StateSucceeded)
	require.EqualValues(t, 3, final.Succeeded)
	require.Zero(t, final.DeadLettered)
	code, body, _ = b.get(loc)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "completed")
	code, body, _ = b.get("/api" + strings.TrimPrefix(loc, "/dlq"))
	require.Equal(t, http.StatusOK, code)
	var rs messages.DLQReplayStatus
	require.NoError(t, json.Unmarshal([]byte(body), &rs))
	require.EqualValues(t, 1, rs.Replayed)
	_, body, _ = b.get("/dlq?job=replayed")
	require.Contains(t, body, "No dead letters match")
}

func TestPurgeNeedsConfirmation(t *testing.T) {
	f := startFleet(t, Config{})
	f.broken.set("x", "y")
	f.runJob(t, `{"id": "purged", "items": [{"id": "x"}, {"id": "y"}, {"id": "z"}], "agent_template": [{"handler": "maybe"}]}`)
	b := f.browser(t)
	_, body, _ := b.get("/dlq?job=purged")
	form := url.Values{"csrf": {csrf(t, body)}, "job": {"purged"}}
	code, body, _ := b.post("/dlq/purge", form)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<b id="purge-count">2</b>`)
	page, err := f.client.DLQList(t.Context(), messages.DLQFilter{JobID: "purged"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 2, "nothing deleted before the confirmation")

	// One entry alone, by its sequence.
	form2 := url.Values{"csrf": form["csrf"], "seq": {fmt.Sprint(page.Entries[0].Seq)}, "confirm": {"yes"}}
	code, body, _ = b.post("/dlq/purge", form2)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<b>1</b> entries deleted`)
	form.Set("confirm", "yes")
	code, body, _ = b.post("/dlq/purge", form)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<b>1</b> entries deleted`)
	page, err = f.client.DLQList(t.Context(), messages.DLQFilter{JobID: "purged"})
	require.NoError(t, err)
	require.Empty(t, page.Entries)
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	f := startFleet(t, Config{ReadOnly: true})
	f.broken.set("b")
	f.runJob(t, `{"id": "ro", "items": [{"id": "a"}, {"id": "b"}], "agent_template": [{"handler": "maybe"}]}`)
	b := f.browser(t)
	for _, p := range []string{"/", "/jobs/ro", "/dlq?job=ro"} {
		code, body, _ := b.get(p)
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, `method="post"`, p)
		require.Contains(t, body, "read-only", p)
	}
	code, body, _ := b.post("/dlq/purge", url.Values{"job": {"ro"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "read-only")
	require.EqualValues(t, 1, f.mustStatus(t, "ro").DeadLettered)
}

func TestCancelFromThePage(t *testing.T) {
	f := startFleet(t, Config{})
	ctx := t.Context()
	// Its items wait at the gate, never opened: the job runs until cancelled.
	_, err := f.client.JobSubmit(ctx, []byte(`{"id": "slow", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}],
		"max_parallel": 1, "agent_template": [{"handler": "gated"}]}`))
	require.NoError(t, err)
	f.waitState(t, "slow", messages.StateRunning)
	b := f.browser(t)
	_, body, _ := b.get("/jobs/slow")
	require.Contains(t, body, "Cancel job")
	require.Contains(t, body, "Cancel and kill running steps")
	code, _, loc := b.post("/jobs/slow/cancel", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/jobs/slow", loc)
	f.waitState(t, "slow", messages.StateCancelled)
	_, body, _ = b.get("/jobs/slow")
	require.NotContains(t, body, "Cancel job")
	// Its running step may still run: a kill is offered, and taken.
	require.Contains(t, body, "Kill running steps")
	code, _, loc = b.post("/jobs/slow/cancel", url.Values{"csrf": {csrf(t, body)}, "kill": {"1"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/jobs/slow", loc)
}

func TestHostAndMethodChecks(t *testing.T) {
	f := startFleet(t, Config{})
	req, _ := http.NewRequest(http.MethodGet, f.base+"/", nil)
	req.Host = "attacker.example:8080"
	resp, err := http.DefaultClient.Do(f.authorize(req))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "DNS rebinding")
	req, _ = http.NewRequest(http.MethodGet, f.base+"/", nil)
	req.Host = "localhost:8080"
	resp, err = http.DefaultClient.Do(f.authorize(req))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, _ = http.NewRequest(http.MethodDelete, f.base+"/dlq", nil)
	resp, err = http.DefaultClient.Do(f.authorize(req))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	// The session cookie is HttpOnly and SameSite=Strict.
	b := f.browser(t)
	resp, err = b.c.Get(f.base + "/dlq")
	require.NoError(t, err)
	resp.Body.Close()
	cookie := resp.Header.Get("Set-Cookie")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
	// A cross-site form post is refused even with the right token.
	_, body, _ := b.get("/dlq")
	req, _ = http.NewRequest(http.MethodPost, f.base+"/dlq/replay", strings.NewReader(url.Values{"csrf": {csrf(t, body)}, "dry_run": {"1"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://attacker.example")
	resp, err = b.c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// Every request needs the access token, on loopback too: a local process
// without it cannot read a page, fetch a CSRF token, cancel a job or purge
// dead letters. The token logs a browser in (a
// cookie, then a redirect without it), or comes as a bearer token or
// basic auth's password; a wrong one is refused.
func TestDashboardNeedsItsToken(t *testing.T) {
	f := startFleet(t, Config{Token: "0123456789abcdef-secret"})
	require.Equal(t, "0123456789abcdef-secret", f.ui.Token())
	anon := f.anonymous(t)
	for _, path := range []string{"/", "/dlq", "/agents", "/jobs/x", "/events?jobs=x", "/static/app.js"} {
		code, body, hdr := anon.get(path)
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, body, "needs its access token", path)
		require.Contains(t, hdr.Get("WWW-Authenticate"), "Basic", path)
		require.NotContains(t, body, `name="csrf"`)
	}
	for _, path := range []string{"/dlq/purge", "/jobs/x/cancel", "/dlq/replay"} {
		code, _, _ := anon.post(path, url.Values{"csrf": {"x"}, "confirm": {"1"}})
		require.Equal(t, http.StatusUnauthorized, code, path)
	}
	code, _, _ := anon.get("/?token=wrong-token-0123456789")
	require.Equal(t, http.StatusUnauthorized, code, "a wrong token")

	b := f.browser(t)
	code, body, _ := b.get("/dlq")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `name="csrf"`)
	code, _, hdr := b.get("/dlq?job=a&token=" + f.ui.Token())
	require.Equal(t, http.StatusOK, code, "a logged-in browser is not redirected")
	require.Empty(t, hdr.Get("Location"))

	req, _ := http.NewRequest(http.MethodGet, f.base+"/agents", nil)
	req.SetBasicAuth("anyone", f.ui.Token())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "basic auth")
	req, _ = http.NewRequest(http.MethodGet, f.base+"/agents", nil)
	req.Header.Set("Authorization", "Bearer nope")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	require.ErrorIs(t, Config{Token: "short"}.WithDefaults().Validate(), ErrShortToken)
}

func TestLiveUpdatesAndAgents(t *testing.T) {
	f := startFleet(t, Config{})
	ctx := t.Context()
	_, err := f.client.JobSubmit(ctx, []byte(`{"id": "livejob", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}],
		"max_parallel": 1, "agent_template": [{"handler": "sleep", "with": {"duration": "150ms"}}]}`))
	require.NoError(t, err)
	events, stop := sseEvents(t, f, "/events?jobs=livejob&events=all&series=1")
	defer stop()
	var sawJob, sawEvent, sawDone bool
	deadline := time.After(60 * time.Second)
	for !(sawJob && sawEvent && sawDone) {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the stream stays open")
			switch ev[0] {
			case "jobs":
				for _, j := range decodeJobs(t, ev[1]) {
					require.Equal(t, "livejob", j.ID, "only the jobs asked for")
					sawJob = true
					if j.State == messages.StateSucceeded && j.Done == 4 {
						sawDone = true
					}
				}
			case "events":
				sawEvent = true
			}
		case <-deadline:
			t.Fatalf("live updates: job %v event %v done %v", sawJob, sawEvent, sawDone)
		}
	}

	b := f.browser(t)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		_, body, _ := b.get("/agents")
		// Each agent's build (its presence), the coordinator's (its micro
		// service info), and the dashboard's own.
		build := template.HTMLEscapeString(version.Get().String())
		for _, want := range []string{"agent-0", "agent-1", "Pool <code>default</code>", `<td class="version"><code>` + build + `</code></td>`, "jetfleet dashboard " + build,
			`<tr data-coordinator="`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("agents page lacks %q", want)
			}
		}
		return nil
	})
	code, body, _ := b.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "livejob")
	require.Contains(t, body, `data-live="`)
}

func (f *testFleet) mustStatus(t testing.TB, id string) *messages.JobStatus {
	t.Helper()
	st, err := f.client.JobStatus(context.Background(), id)
	require.NoError(t, err)
	return st
}
