package dlq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoreServerGoroutines())
}

var names = messages.MustNames("")

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fleet is an embedded server with jetfleet's streams.
type fleet struct {
	srv *natstest.Server
	js  jetstream.JetStream
}

func newFleet(t testing.TB, prov provision.Config) *fleet {
	t.Helper()
	srv := natstest.RunServer(t)
	if prov.DLQMaxBytes == 0 {
		prov.DLQMaxBytes = 64 << 20
	}
	require.NoError(t, provision.Ensure(testCtx(t, 30*time.Second), srv.JS(), names, prov))
	// The entries' pool has its work consumer, as a coordinator makes it
	// (a replay refuses a pool without one).
	_, err := provision.EnsurePool(testCtx(t, 30*time.Second), srv.JS(), names, "default", prov)
	require.NoError(t, err)
	return &fleet{srv: srv, js: srv.JS()}
}

// entry builds a dead-letter entry of job's item i with the given error.
func entry(job string, i int, class, msg string) *messages.DLQEntry {
	exit := 3
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	id := fmt.Sprintf("item-%03d", i)
	return &messages.DLQEntry{
		JobID: job, ItemID: id, Index: int64(i), Pool: "default",
		Payload:       json.RawMessage(fmt.Sprintf(`{"id":%q,"n":%d}`, id, i)),
		CorrelationID: fmt.Sprintf("%s:%d", job, i),
		Subject:       names.WorkSubject("default", job), StreamSeq: uint64(100 + i),
		Attempts: []messages.Attempt{
			{Attempt: 1, Step: 0, StepName: "step-1", Agent: "a1", Time: t0, DurationMS: 12, ErrorClass: class, Message: msg, ExitCode: &exit, Decision: "retry"},
			{Attempt: 2, Step: 0, StepName: "step-1", Agent: "a2", Time: t0.Add(time.Second), DurationMS: 9, ErrorClass: class, Message: msg, ExitCode: &exit, Decision: "give_up"},
		},
		Reason: messages.ReasonAttempts, Error: "exit status 3: " + msg, ErrorClass: class,
		Signature: sigOf(msg), DeadLetteredAt: t0.Add(2 * time.Second), Agent: "a2",
	}
}

// sigOf is a stable fake signature per message.
func sigOf(msg string) string {
	return fmt.Sprintf("%016x", len(msg)*7919+int(msg[0]))
}

func (f *fleet) write(t testing.TB, es ...*messages.DLQEntry) {
	t.Helper()
	w := dlq.NewWriter(f.js, names, "default")
	for _, e := range es {
		require.NoError(t, w.Write(testCtx(t, 10*time.Second), e))
	}
}

func (f *fleet) streamInfo(t testing.TB, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := f.js.Stream(testCtx(t, 10*time.Second), name)
	require.NoError(t, err)
	info, err := s.Info(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	return info
}

// workItems reads every message of the work stream (no consumer takes them).
func (f *fleet) workItems(t testing.TB) []workMsg {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	s, err := f.js.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []workMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var wi wire.WorkItem
		require.NoError(t, json.Unmarshal(m.Data, &wi))
		out = append(out, workMsg{subject: m.Subject, msgID: m.Header.Get(messages.HeaderMsgID), item: wi})
	}
	return out
}

type workMsg struct {
	subject, msgID string
	item           wire.WorkItem
}

// results reads every message of the results stream.
func (f *fleet) results(t testing.TB) []messages.Result {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	s, err := f.js.Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []messages.Result
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var r messages.Result
		require.NoError(t, json.Unmarshal(m.Data, &r))
		out = append(out, r)
	}
	return out
}

// fakeClock advances only when someone waits on it: After(d) moves the
// time by d and fires at once, so pacing is tested without sleeping.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) elapsed(from time.Time) time.Duration {
	return c.Now().Sub(from)
}

func jetstreamMsgID(id string) jetstream.PublishOpt { return jetstream.WithMsgID(id) }
