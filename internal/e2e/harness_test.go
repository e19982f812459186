package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// testProvision keeps crash detection short so redelivery tests are quick.
var testProvision = provision.Config{AckWait: 2 * time.Second, MaxDeliver: 50, DLQMaxBytes: 64 << 20}

// calmProvision is testProvision with a crash timeout no loaded machine
// reaches, for tests that kill nothing and count runs exactly: with the
// 2 s AckWait a delivery whose result waits on a slow PubAck may be
// redelivered and run again, which at-least-once allows but such a test
// would misread.
var calmProvision = provision.Config{AckWait: 30 * time.Second, MaxDeliver: 50, DLQMaxBytes: 64 << 20}

// testLogger is a process's logger in a test: with -v its lines go to the
// test's log; without, the last failLogBytes of them are kept and printed
// only if the test fails, so that a failure seen once says what the
// coordinators and agents were doing.
func testLogger(t testing.TB) zerolog.Logger {
	if _, fuzz := t.(*testing.F); fuzz {
		if testing.Verbose() {
			// The fuzz target's goroutines must not log to the *testing.F.
			return zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
		}
		return zerolog.Nop()
	}
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	w := &tailWriter{max: failLogBytes}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what a process of the test logged last (%d bytes at most):\n%s", failLogBytes, w.String())
		}
	})
	return zerolog.New(w).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

// failLogBytes bounds what testLogger keeps of one process's log.
const failLogBytes = 32 << 10

// tailWriter keeps the last max bytes written to it, whole lines. It is
// safe for concurrent use.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.max {
		cut := len(w.buf) - w.max
		if i := bytes.IndexByte(w.buf[cut:], '\n'); i >= 0 {
			cut += i + 1
		}
		w.buf = append(w.buf[:0], w.buf[cut:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// proc is a coordinator or agent running on its own connection, so a test
// can stop it gracefully (cancel) or hard (close the connection first).
type proc struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (p *proc) stop(t testing.TB) {
	p.once.Do(func() {
		p.cancel()
		select {
		case err := <-p.done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			buf := make([]byte, 1<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			t.Fatal("process did not stop within 30s")
		}
		p.nc.Close()
	})
}

// kill closes the connection without acking anything, then stops.
func (p *proc) kill(t testing.TB) {
	p.once.Do(func() {
		p.nc.Close()
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatal("killed process did not return within 30s")
		}
	})
}

func startCoordinator(t testing.TB, url string, cfg coordinator.Config) *proc {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	if cfg.Provision == (coordinator.Provision{}) {
		cfg.Provision = coordinator.Provision(testProvision)
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 20 * time.Millisecond
	}
	cfg.Logger = testLogger(t).With().Str("proc", "coordinator").Logger()
	c, err := coordinator.New(nc, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-p.done:
		t.Fatalf("coordinator exited early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("coordinator not ready")
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func startAgent(t testing.TB, url string, cfg agent.Config, handlers map[string]agent.HandlerFunc) *proc {
	t.Helper()
	return startAgentLogged(t, url, cfg, testLogger(t).With().Str("proc", cfg.Name).Logger(), handlers)
}

// startAgentLogged is startAgent with the agent's logger.
func startAgentLogged(t testing.TB, url string, cfg agent.Config, log zerolog.Logger, handlers map[string]agent.HandlerFunc) *proc {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	testhooks.UpdateAgent(&cfg, func(h *testhooks.Agent) {
		if h.Provision == (provision.Config{}) {
			h.Provision = testProvision
		}
	})
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.WorkDir == "" {
		// Not the package's directory (the default, the working
		// directory): failed items' directories are kept there.
		cfg.WorkDir = t.TempDir()
	}
	cfg.Logger = log
	a := agent.New(nc, cfg).HandleBuiltins()
	for name, fn := range handlers {
		a.Handle(name, fn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.Run(ctx) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func client(t testing.TB, srv *fleettest.Server) *jfclient.Client {
	c, err := jfclient.New(srv.Conn(), "")
	require.NoError(t, err)
	return c
}

func submit(t testing.TB, c *jfclient.Client, spec string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := c.JobSubmit(ctx, []byte(spec))
	require.NoError(t, err)
	return reply.JobID
}

// waitJob waits for the job to end and checks that its counts add up.
func waitJob(t testing.TB, c *jfclient.Client, id string, timeout time.Duration) *messages.JobStatus {
	t.Helper()
	return waitJobOr(t, c, id, timeout, nil)
}

// waitJobOr is waitJob that calls stalled, if not nil, when the job does
// not end in time (to log what the fleet holds).
func waitJobOr(t testing.TB, c *jfclient.Client, id string, timeout time.Duration, stalled func()) *messages.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last *messages.JobStatus
	// JobWait hears of the end from the job's events; the status it reads
	// every waitJobEvery is only for the failure message (and an end whose
	// event was lost). Read every 20 ms, the package's status requests
	// were a tenth of its CPU time: each is a subscription made and
	// dropped on the server, and a status the coordinator builds.
	st, err := c.JobWait(ctx, id, waitJobEvery, func(s *messages.JobStatus) { last = s })
	if err != nil && stalled != nil {
		stalled()
	}
	require.NoError(t, err, "job %s did not end; last status %+v", id, last)
	require.Equal(t, st.Items, st.Succeeded+st.DeadLettered+st.Skipped+st.NotRun+st.Failed, "counts must add up: %+v", st)
	return st
}

// waitJobEvery is how often waitJob reads a running job's status.
const waitJobEvery = time.Second

// waitDone waits until at least n items of the job are done.
func waitDone(t testing.TB, c *jfclient.Client, id string, n int64) {
	t.Helper()
	fleettest.WaitFor(t, 30*time.Second, func() error {
		st, err := c.JobStatus(context.Background(), id)
		if err != nil {
			return err
		}
		if st.Done() < n {
			return errNotYet
		}
		return nil
	})
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}

func itemsJSON(n int, mk func(i int) map[string]any) string {
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = mk(i)
	}
	b, _ := json.Marshal(items)
	return string(b)
}

// scaleEnv, set to 1, runs the multi-minute scale cases (.ci/run sets it);
// go test ./... skips them, as -race and -short do.
const scaleEnv = "JETFLEET_SCALE"

// skipScale skips a multi-minute scale case unless scaleEnv is set, and
// always under -race or -short.
func skipScale(t *testing.T, what string) {
	t.Helper()
	if testing.Short() || raceEnabled || os.Getenv(scaleEnv) != "1" {
		t.Skipf("%s: a scale case; run with %s=1, without -race and -short (.ci/run does)", what, scaleEnv)
	}
}
