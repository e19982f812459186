package jobrun

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The coordinator's spans (docs/tracing.md): the API's submit, the
// acceptance from the jobs stream, each publish batch and the reduce
// item. A job's trace context is kept in its record (JobRecord.Trace), so
// that its items, published later or by another coordinator, join it.

// traceAPISubmit starts the jobs.submit endpoint's span.
func (c *Coordinator) traceAPISubmit(ctx context.Context, job string) (context.Context, trace.Span) {
	if !c.tr.On() {
		return ctx, tracing.NoSpan()
	}
	return c.tr.Start(ctx, tracing.SpanAPISubmit, trace.SpanKindServer, tracing.AttrJobID.String(job))
}

// submissionMsg is a submission for the jobs stream, carrying ctx's trace
// context.
func (c *Coordinator) submissionMsg(ctx context.Context, body []byte) *nats.Msg {
	m := nats.NewMsg(c.names.JobsSubmitSubject())
	m.Data = body
	m.Header.Set(messages.HeaderSchema, schemaHeader)
	tracing.Inject(ctx, m.Header)
	return m
}

// traceAccepted records the accepted job on the acceptance span and in
// its record.
func traceAccepted(ctx context.Context, rec *wire.JobRecord) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrJobID.String(rec.Status.ID), tracing.AttrItems.Int64(rec.Status.Items), tracing.AttrPool.String(rec.Status.Pool))
	}
	rec.Trace = tracing.Traceparent(ctx)
}

// tracePublish starts the span of one publish batch of job, a child of
// the job's trace (traceparent, "" = none): its items carry the batch's
// trace context. Off, it returns the job's traceparent and a span that
// records nothing.
func (p *publisher) tracePublish(ctx context.Context, first int64, n int) (string, trace.Span) {
	if !p.tr.On() || p.trace == "" {
		return p.trace, tracing.NoSpan() // the job's trace passes through
	}
	ctx, span := p.tr.Start(tracing.FromTraceparent(ctx, p.trace), tracing.SpanPublish, trace.SpanKindProducer,
		tracing.AttrJobID.String(p.job), tracing.AttrIndex.Int64(first), tracing.AttrItems.Int(n))
	return tracing.Traceparent(ctx), span
}

// traceReduce starts the span of publishing job's reduce item and sets
// its trace context on m.
func (c *Coordinator) traceReduce(ctx context.Context, job, traceparent string, m *nats.Msg) trace.Span {
	if traceparent == "" {
		return tracing.NoSpan()
	}
	ctx = tracing.FromTraceparent(ctx, traceparent)
	ctx, span := c.tr.Start(ctx, tracing.SpanReduce, trace.SpanKindProducer, tracing.AttrJobID.String(job))
	tracing.Inject(ctx, m.Header)
	return span
}
