package tracing_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/tracing"
)

// The trace context travels in NATS headers and back; sampling follows
// the parent.
func TestHeadersCarryTheTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	tr := tracing.New(tp)
	ctx, parent := tr.Start(context.Background(), "parent", trace.SpanKindProducer)
	h := nats.Header{}
	tracing.Inject(ctx, h)
	require.Equal(t, tracing.Traceparent(ctx), h.Get(tracing.HeaderTraceparent))
	_, child := tr.Start(tracing.Extract(context.Background(), h), "child", trace.SpanKindConsumer)
	require.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID())
	child.End()
	parent.End()

	// An unsampled parent: the child is not sampled either.
	unsampled := nats.Header{tracing.HeaderTraceparent: {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}
	_, c2 := tr.Start(tracing.Extract(context.Background(), unsampled), "child", trace.SpanKindConsumer)
	require.False(t, c2.SpanContext().IsSampled())
	require.False(t, c2.IsRecording())
	c2.End()
	require.Len(t, rec.Ended(), 2)

	require.Equal(t, []string{"TRACEPARENT=" + tracing.Traceparent(ctx)}, tracing.Env(ctx))
	require.Nil(t, tracing.Env(context.Background()))
}

// Off, the hooks on the hot path allocate nothing.
func TestOffAllocatesNothing(t *testing.T) {
	var tr tracing.Tracer
	h := nats.Header{"Nats-Msg-Id": {"x"}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c := tracing.Extract(ctx, h)
		c, span := tr.Start(c, tracing.SpanItem, trace.SpanKindConsumer)
		_ = tracing.Env(c)
		span.End()
	})
	require.Zero(t, allocs)
}
