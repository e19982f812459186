package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// spanTree indexes recorded spans.
type spanTree struct {
	spans []sdktrace.ReadOnlySpan
	byID  map[trace.SpanID]sdktrace.ReadOnlySpan
}

func newSpanTree(spans []sdktrace.ReadOnlySpan) spanTree {
	t := spanTree{spans: spans, byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}}
	for _, s := range spans {
		t.byID[s.SpanContext().SpanID()] = s
	}
	return t
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// named returns the spans called name whose attribute key is value ("":
// any).
func (t spanTree) named(name string, key attribute.Key, value string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range t.spans {
		if s.Name() == name && (value == "" || attr(s, key).Emit() == value) {
			out = append(out, s)
		}
	}
	return out
}

// path is the names of s and its ancestors, root last.
func (t spanTree) path(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for {
		names = append(names, s.Name())
		p, ok := t.byID[s.Parent().SpanID()]
		if !ok {
			return names
		}
		s = p
	}
}

func spanEvents(s sdktrace.ReadOnlySpan) map[string]sdktrace.Event {
	m := map[string]sdktrace.Event{}
	for _, e := range s.Events() {
		m[e.Name] = e
	}
	return m
}

func eventAttr(e sdktrace.Event, key attribute.Key) attribute.Value {
	for _, kv := range e.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A job's trace, from Client.Submit to each step run: one trace; the
// submit, the API, the acceptance, the publish batch, each delivery and
// each step run as spans in that order; a retry as a second delivery of
// the same trace with attempt 2; a dead letter as the give_up and
// dead_letter events of the failed run; the reduce under the acceptance.
// A shell step sees its span as TRACEPARENT, a Go handler in its ctx.
func TestJobTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{TracerProvider: tp})
	var (
		mu       sync.Mutex
		handlerT = map[string]trace.SpanContext{}
	)
	handlers := map[string]agent.HandlerFunc{"check": func(ctx context.Context, c *agent.Call) (any, error) {
		mu.Lock()
		handlerT[fmt.Sprintf("%s/%d", c.ItemID, c.Attempt)] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		switch {
		case c.ItemID == "bad":
			return nil, retry.Permanent(errors.New("bad item"))
		case c.ItemID == "flaky" && c.Attempt == 1:
			return nil, errors.New("flaky: try again")
		}
		return "ok", nil
	}}
	startAgent(t, srv.URL(), agent.Config{Name: "traced", TracerProvider: tp}, handlers)
	cl, err := jfclient.New(srv.Conn(), "", jfclient.WithTracerProvider(tp))
	require.NoError(t, err)

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := cl.JobSubmit(ctx, []byte(`{"id": "traced", "items": [{"id": "ok"}, {"id": "flaky"}, {"id": "bad"}],
		"agent_template": [
			{"name": "shell", "shell": "printf %s \"$TRACEPARENT\" > `+dir+`/${item.id}"},
			{"name": "go", "handler": "check", "retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms", "jitter": false}}],
		"reduce": [{"name": "sum", "shell": "true"}]}`))
	require.NoError(t, err)
	st := waitJob(t, cl, reply.JobID, 30*time.Second)
	require.EqualValues(t, 2, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)

	// Spans end after the results that ended the job: wait for the
	// deliveries' (four map deliveries, one reduce).
	var tree spanTree
	fleettest.WaitFor(t, 20*time.Second, func() error {
		tree = newSpanTree(rec.Ended())
		if n := len(tree.named(tracing.SpanItem, "", "")); n < 5 {
			return fmt.Errorf("%d delivery spans", n)
		}
		return nil
	})

	// One trace, rooted at the submit.
	roots := tree.named(tracing.SpanSubmit, "", "")
	require.Len(t, roots, 1)
	root := roots[0]
	require.False(t, root.Parent().IsValid())
	require.Equal(t, "traced", attr(root, tracing.AttrJobID).AsString())
	for _, s := range tree.spans {
		require.Equal(t, root.SpanContext().TraceID(), s.SpanContext().TraceID(), "span %s in another trace", s.Name())
	}

	mapPath := []string{tracing.SpanStep, tracing.SpanItem, tracing.SpanPublish, tracing.SpanAccept, tracing.SpanAPISubmit, tracing.SpanSubmit}
	stepOf := func(item string, step, attempt int) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, s := range tree.named(tracing.SpanStep, tracing.AttrItemID, item) {
			if attr(s, tracing.AttrStep).AsInt64() == int64(step) && attr(s, tracing.AttrAttempt).AsInt64() == int64(attempt) {
				return s
			}
		}
		t.Fatalf("no span of %s step %d attempt %d", item, step, attempt)
		return nil
	}

	// ok: one delivery, two step runs.
	ok := tree.named(tracing.SpanItem, tracing.AttrItemID, "ok")
	require.Len(t, ok, 1)
	require.Equal(t, "succeeded", attr(ok[0], tracing.AttrOutcome).AsString())
	require.Equal(t, mapPath, tree.path(stepOf("ok", 1, 1)))
	require.Equal(t, codes.Ok, stepOf("ok", 1, 1).Status().Code)

	// flaky: a retry is a second delivery in the same trace, under the
	// same publish batch; the failed run says what was decided.
	flaky := tree.named(tracing.SpanItem, tracing.AttrItemID, "flaky")
	require.Len(t, flaky, 2)
	require.Equal(t, flaky[0].Parent().SpanID(), flaky[1].Parent().SpanID())
	failed := stepOf("flaky", 1, 1)
	require.Equal(t, codes.Error, failed.Status().Code)
	ev := spanEvents(failed)
	require.Contains(t, ev, tracing.EventBudget)
	require.True(t, eventAttr(ev[tracing.EventBudget], tracing.AttrBudgetGrant).AsBool())
	require.Contains(t, ev, tracing.EventRetry)
	require.EqualValues(t, 10, eventAttr(ev[tracing.EventRetry], tracing.AttrDelayMS).AsInt64())
	require.Equal(t, "retry", eventAttr(ev[tracing.EventRetry], tracing.AttrDecision).AsString())
	retried := stepOf("flaky", 1, 2)
	require.Equal(t, codes.Ok, retried.Status().Code)
	require.Equal(t, mapPath, tree.path(retried))
	require.NotEqual(t, failed.Parent().SpanID(), retried.Parent().SpanID(), "the retry runs in a new delivery span")

	// bad: given up and dead-lettered.
	bad := tree.named(tracing.SpanItem, tracing.AttrItemID, "bad")
	require.Len(t, bad, 1)
	require.Equal(t, "dead_lettered", attr(bad[0], tracing.AttrOutcome).AsString())
	ev = spanEvents(stepOf("bad", 1, 1))
	require.Contains(t, ev, tracing.EventGiveUp)
	require.Equal(t, "dead_lettered", eventAttr(ev[tracing.EventGiveUp], tracing.AttrOutcome).AsString())
	require.Contains(t, ev, tracing.EventDeadLetter)

	// The reduce: its publish and its delivery under the acceptance.
	reduce := tree.named(tracing.SpanItem, tracing.AttrPhase, "reduce")
	require.Len(t, reduce, 1)
	require.Equal(t, []string{tracing.SpanItem, tracing.SpanReduce, tracing.SpanAccept, tracing.SpanAPISubmit, tracing.SpanSubmit}, tree.path(reduce[0]))
	require.Equal(t, "succeeded", attr(reduce[0], tracing.AttrOutcome).AsString())

	// The shell step saw its own span as TRACEPARENT; the handler got its
	// span in ctx.
	data, err := os.ReadFile(filepath.Join(dir, "ok"))
	require.NoError(t, err)
	shellStep := stepOf("ok", 0, 1)
	want := fmt.Sprintf("00-%s-%s-01", shellStep.SpanContext().TraceID(), shellStep.SpanContext().SpanID())
	require.Equal(t, want, strings.TrimSpace(string(data)))
	mu.Lock()
	require.Equal(t, stepOf("ok", 1, 1).SpanContext().SpanID(), handlerT["ok/1"].SpanID())
	mu.Unlock()
}
