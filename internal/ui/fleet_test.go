package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	apiclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// testFleet is an embedded server with a coordinator, agents and a
// dashboard, for the dashboard's tests.
type testFleet struct {
	srv    *fleettest.Server
	client *apiclient.Client
	ui     *Server
	base   string // http://127.0.0.1:port
	broken *brokenItems
	gate   *gate
}

// gate holds the "gated" handler's items until the test opens it (or the
// test ends), so that a test never depends on an item still running after
// some time.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) handler(ctx context.Context, _ *agent.Call) (any, error) {
	select {
	case <-g.ch:
		return "ok", nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// brokenItems is the set of item ids the "maybe" handler fails for good.
type brokenItems struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (b *brokenItems) set(ids ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids = map[string]bool{}
	for _, id := range ids {
		b.ids[id] = true
	}
}

func (b *brokenItems) handler(_ context.Context, c *agent.Call) (any, error) {
	b.mu.Lock()
	bad := b.ids[c.ItemID]
	b.mu.Unlock()
	if bad {
		return nil, retry.Permanent(errors.New(`disk full: <img src=x onerror=alert(1)> on /dev/sda`))
	}
	return "ok", nil
}

var testProv = provision.Config{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}

func testLogger(t testing.TB) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	return zerolog.Nop()
}

// startFleet starts a server, a coordinator, two agents and a dashboard.
func startFleet(t testing.TB, cfg Config) *testFleet {
	t.Helper()
	// Registered first, so it runs after every other cleanup: the
	// dashboard, the fleet and the server leave no goroutine behind.
	natstest.VerifyNoLeaks(t)
	f := &testFleet{broken: &brokenItems{}, gate: &gate{ch: make(chan struct{})}}
	handlers := agent.Builtins()
	handlers["maybe"] = f.broken.handler
	handlers["gated"] = f.gate.handler
	fleet := fleettest.RunFleet(t, handlers,
		fleettest.WithAgents(2), fleettest.WithConcurrency(4), fleettest.WithLogger(testLogger(t)),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) {
			c.Provision, c.StatusInterval = coordinator.Provision(testProv), 20*time.Millisecond
		}),
		fleettest.WithAgentConfig(func(i int, c *agent.Config) {
			c.Name = fmt.Sprintf("agent-%d", i)
			testhooks.UpdateAgent(c, func(h *testhooks.Agent) { h.Provision = testProv })
			c.ShutdownTimeout, c.PresenceInterval = time.Second, 200*time.Millisecond
		}))
	f.srv, f.client = fleet.Server, fleet.Client
	t.Cleanup(f.gate.open) // before the agents stop
	// The dashboard stops before its connection closes (cleanups run
	// last-registered first).
	uiConn := f.srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	cfg.Logger = testLogger(t)
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = 50 * time.Millisecond
	}
	var err error
	f.ui, err = New(uiConn, cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	wg.Add(1)
	go func() { defer wg.Done(); _ = f.ui.Serve(ctx, ln) }()
	f.base = "http://" + f.ui.Addr().String()
	return f
}

// submit submits a job and waits for it to end.
func (f *testFleet) runJob(t testing.TB, spec string) *messages.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reply, err := f.client.JobSubmit(ctx, []byte(spec))
	require.NoError(t, err)
	st, err := f.client.JobWait(ctx, reply.JobID, 20*time.Millisecond, nil)
	require.NoError(t, err)
	return st
}

// browser is an HTTP client with a cookie jar, as a browser would be.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

// browser returns a browser logged in as a visitor would be: it opened the
// login address once.
func (f *testFleet) browser(t testing.TB) *browser {
	b := f.anonymous(t)
	code, _, hdr := b.get("/?token=" + f.ui.Token())
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/", hdr.Get("Location"), "the token leaves the address")
	return b
}

// anonymous returns a browser that has not logged in.
func (f *testFleet) anonymous(t testing.TB) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: f.base, c: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// authorize adds the access token to a request made without a browser.
func (f *testFleet) authorize(req *http.Request) *http.Request {
	req.Header.Set("Authorization", "Bearer "+f.ui.Token())
	return req
}

// get fetches path and returns the status and body.
func (b *browser) get(path string) (int, string, http.Header) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, string(body), resp.Header
}

// post submits a form and returns the status, body and Location.
func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.base)
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get("Location")
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token in a page's forms.
func csrf(t testing.TB, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	require.NotNil(t, m, "the page has a form with a CSRF token")
	return m[1]
}

// waitState polls the job until its state is want.
func (f *testFleet) waitState(t testing.TB, id, want string) *messages.JobStatus {
	t.Helper()
	var st *messages.JobStatus
	fleettest.WaitFor(t, 60*time.Second, func() error {
		var err error
		st, err = f.client.JobStatus(context.Background(), id)
		if err != nil {
			return err
		}
		if st.State != want {
			return fmt.Errorf("state %s, want %s", st.State, want)
		}
		return nil
	})
	return st
}

// sse reads server-sent events from path until stop is closed.
func sseEvents(t testing.TB, f *testFleet, path string) (<-chan [2]string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(f.authorize(req))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := make(chan [2]string, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		buf := make([]byte, 64<<10)
		var pending string
		for {
			n, err := resp.Body.Read(buf)
			pending += string(buf[:n])
			for {
				i := strings.Index(pending, "\n\n")
				if i < 0 {
					break
				}
				frame := pending[:i]
				pending = pending[i+2:]
				var ev, data string
				for _, line := range strings.Split(frame, "\n") {
					if v, ok := strings.CutPrefix(line, "event: "); ok {
						ev = v
					}
					if v, ok := strings.CutPrefix(line, "data: "); ok {
						data = v
					}
				}
				if ev != "" {
					select {
					case out <- [2]string{ev, data}:
					default:
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return out, cancel
}

// decodeJobs decodes a "jobs" frame.
func decodeJobs(t testing.TB, data string) []liveJob {
	var js []liveJob
	require.NoError(t, json.Unmarshal([]byte(data), &js))
	return js
}
