// Package tracing is jetfleet's OpenTelemetry wiring: the W3C trace
// context in NATS message headers, the spans' names and attributes, and
// the tracer provider the binaries build from the standard OTEL_*
// variables.
//
// A Tracer's zero value is off: every method then returns at once without
// allocating, so the hot paths (an agent's item, a coordinator's publish
// batch) call them unconditionally.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName names jetfleet's instrumentation scope.
const ScopeName = "github.com/jetfleet/jetfleet"

// Span names: each names a step of a job's life, from its submission to
// the run of each of its items' steps.
const (
	SpanSubmit    = "jetfleet.submit"     // Client.Submit, fleetctl submit
	SpanAPISubmit = "jetfleet.api.submit" // the coordinator's jobs.submit endpoint
	SpanAccept    = "jetfleet.accept"     // the coordinator accepts the job from the jobs stream
	SpanPublish   = "jetfleet.publish"    // one batch of the job's work messages
	SpanReduce    = "jetfleet.reduce"     // the coordinator publishes the reduce item
	SpanItem      = "jetfleet.item"       // one delivery of an item to an agent
	SpanStep      = "jetfleet.step"       // one run (attempt) of a step
)

// Attribute keys: jetfleet's ids and outcomes.
const (
	AttrJobID        = attribute.Key("jetfleet.job_id")
	AttrItemID       = attribute.Key("jetfleet.item_id")
	AttrIndex        = attribute.Key("jetfleet.item_index")
	AttrPool         = attribute.Key("jetfleet.pool")
	AttrAgent        = attribute.Key("jetfleet.agent")
	AttrPhase        = attribute.Key("jetfleet.phase")
	AttrDelivered    = attribute.Key("jetfleet.num_delivered")
	AttrGeneration   = attribute.Key("jetfleet.generation")
	AttrItems        = attribute.Key("jetfleet.items")
	AttrStep         = attribute.Key("jetfleet.step")
	AttrStepName     = attribute.Key("jetfleet.step_name")
	AttrAttempt      = attribute.Key("jetfleet.attempt")
	AttrKind         = attribute.Key("jetfleet.kind")
	AttrDecision     = attribute.Key("jetfleet.decision")
	AttrDelayMS      = attribute.Key("jetfleet.delay_ms")
	AttrParked       = attribute.Key("jetfleet.parked")
	AttrOutcome      = attribute.Key("jetfleet.outcome")
	AttrReason       = attribute.Key("jetfleet.reason")
	AttrErrorClass   = attribute.Key("jetfleet.error_class")
	AttrBudgetGrant  = attribute.Key("jetfleet.budget_granted")
	AttrBudgetReason = attribute.Key("jetfleet.budget_reason")
	AttrExisting     = attribute.Key("jetfleet.existing")
	// AttrHTTPFinalURL is where an http step's answer came from, when it
	// followed redirects.
	AttrHTTPFinalURL = attribute.Key("jetfleet.http.final_url")
)

// Event names on a step's span: what the agent decided after the run.
const (
	EventBudget     = "budget"      // a retry's claim on the budgets: granted or denied (reason)
	EventRetry      = "retry"       // a redelivery after delay_ms: retry, snooze or item; parked or not
	EventGiveUp     = "give_up"     // the item's end: outcome (dead_lettered, failed, skipped), reason
	EventDeadLetter = "dead_letter" // the dead-letter entry is stored
)

// Header names of the W3C trace context, as they travel in NATS headers.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// EnvTraceparent is the variable a shell step finds its step's trace
// context in (the W3C format, as OpenTelemetry SDKs and the otel-cli read
// it).
const EnvTraceparent = "TRACEPARENT"

var propagator = propagation.TraceContext{}

// noSpan records nothing; ending it ends nothing (not a span of the caller's).
var noSpan = trace.SpanFromContext(context.Background())

// Header carries the trace context in a NATS message's headers. Keys are
// lower case, as the W3C specifies and as other NATS clients write them.
type Header nats.Header

// Get returns the first value of key.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Keys lists the keys.
func (h Header) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Tracer starts jetfleet's spans. Its zero value is off. Safe for
// concurrent use.
type Tracer struct {
	t trace.Tracer
}

// New returns a Tracer of tp; nil tp is off.
func New(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(ScopeName)}
}

// On reports whether spans are recorded.
func (t Tracer) On() bool { return t.t != nil }

// Start starts a span named name as a child of ctx's span. Off, it
// returns ctx and a span that records nothing (never ctx's own span).
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.t == nil {
		return ctx, noSpan
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// Extract returns ctx with the remote span context that h carries, if
// any; with no trace context in h it returns ctx. It extracts whether or
// not spans are recorded, so that a trace passes through.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	if _, ok := h[HeaderTraceparent]; !ok {
		return ctx
	}
	return propagator.Extract(ctx, Header(h))
}

// Inject writes ctx's span context into h (which must not be nil).
// Nothing is written when ctx holds no valid span context: a caller's own
// trace travels even when jetfleet records no spans.
func Inject(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, Header(h))
}

// Traceparent is ctx's span context in the W3C traceparent format, or ""
// when it holds none.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	h := Header{}
	propagator.Inject(ctx, h)
	return h.Get(HeaderTraceparent)
}

// FromTraceparent returns ctx with the remote span context tp names ("":
// ctx unchanged).
func FromTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, Header{HeaderTraceparent: {tp}})
}

// Env is the TRACEPARENT entry for a shell step run in ctx's span, or nil.
func Env(ctx context.Context) []string {
	tp := Traceparent(ctx)
	if tp == "" {
		return nil
	}
	return []string{EnvTraceparent + "=" + tp}
}

// Fail marks span failed with err's message.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, err.Error())
}

// NoSpan is a span that records nothing.
func NoSpan() trace.Span { return noSpan }
