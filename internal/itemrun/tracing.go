package itemrun

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The agent's spans (docs/tracing.md): one per delivery (jetfleet.item), a
// child of the trace context its work message carries, and under it one
// per step run (jetfleet.step) with what the agent decided after it as
// events (budget, retry, give_up, dead_letter). A retry is a redelivery,
// so its runs are under a new delivery span of the same trace. Off
// (Config.TracerProvider nil), every hook returns at once: the delivery
// still passes a trace context it carries on to handlers (ctx) and shell
// steps (TRACEPARENT).

// itemTrace holds a delivery's spans: nil when not traced.
type itemTrace struct {
	item, step trace.Span
}

// traceItem starts the delivery's span and returns ctx with it (or with
// the message's remote trace context, off).
func (a *Agent) traceItem(ctx context.Context, it *item) context.Context {
	ctx = tracing.Extract(ctx, it.m.Headers())
	if !a.tr.On() {
		return ctx
	}
	ctx, it.trace.item = a.tr.Start(ctx, tracing.SpanItem, trace.SpanKindConsumer,
		tracing.AttrPool.String(a.cfg.Pool), tracing.AttrAgent.String(a.cfg.Name))
	return ctx
}

// endItemTrace ends the delivery's spans, naming what it was.
func (a *Agent) endItemTrace(it *item) {
	if it.trace.item == nil {
		return
	}
	if it.trace.step != nil {
		it.trace.step.End()
	}
	phase := "map"
	if it.wi.Phase != "" {
		phase = it.wi.Phase
	}
	attrs := []attribute.KeyValue{
		tracing.AttrJobID.String(it.wi.JobID), tracing.AttrItemID.String(it.wi.ItemID),
		tracing.AttrIndex.Int64(it.wi.Index), tracing.AttrPhase.String(phase),
		tracing.AttrGeneration.Int64(int64(it.wi.Generation)),
	}
	if it.md != nil {
		attrs = append(attrs, tracing.AttrDelivered.Int64(int64(it.md.NumDelivered)))
	}
	it.trace.item.SetAttributes(attrs...)
	it.trace.item.End()
}

// traceStep starts the span of a run of step i (ending the previous
// step's) and returns ctx with it: handlers get it in their ctx, shell
// steps its TRACEPARENT.
func (a *Agent) traceStep(ctx context.Context, it *item, i, attempt int) context.Context {
	if it.trace.item == nil {
		return ctx
	}
	if it.trace.step != nil {
		it.trace.step.End()
	}
	kind := "handler"
	name := ""
	if i < len(it.set.steps) {
		switch {
		case it.set.steps[i].Shell != "":
			kind = "shell"
		case it.set.steps[i].WriteFile != nil:
			kind = "write_file"
		}
		name = it.set.steps[i].Name
	}
	ctx, it.trace.step = a.tr.Start(ctx, tracing.SpanStep, trace.SpanKindInternal,
		tracing.AttrJobID.String(it.wi.JobID), tracing.AttrItemID.String(it.wi.ItemID),
		tracing.AttrStep.Int(i), tracing.AttrStepName.String(name), tracing.AttrAttempt.Int(attempt),
		tracing.AttrKind.String(kind))
	return ctx
}

// traceStepRan records the run's failure (f nil: success).
func (a *Agent) traceStepRan(it *item, f *retry.Failure) {
	if it.trace.step == nil {
		return
	}
	if f != nil {
		it.trace.step.SetStatus(codes.Error, f.Error().Error())
		return
	}
	it.trace.step.SetStatus(codes.Ok, "")
}

// stepEvent adds an event to the current step's span, or to the
// delivery's when no step ran in it (a give-up decided before any run).
func (it *item) stepEvent(name string, attrs ...attribute.KeyValue) {
	span := it.trace.step
	if span == nil {
		span = it.trace.item
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}

// traceBudget records a retry's claim on the budgets.
func (a *Agent) traceBudget(it *item, g budget.Grant) {
	if it.trace.item == nil {
		return
	}
	attrs := []attribute.KeyValue{tracing.AttrBudgetGrant.Bool(g.Granted)}
	if g.Deny != nil {
		attrs = append(attrs, tracing.AttrBudgetReason.String(g.Deny.Reason))
	}
	it.stepEvent(tracing.EventBudget, attrs...)
}

// traceDecision records what the failure path decided.
func (a *Agent) traceDecision(it *item, e failure.End) {
	if it.trace.item == nil {
		return
	}
	switch e.Kind {
	case failure.EndRetry, failure.EndSnooze, failure.EndItemRetry:
		it.stepEvent(tracing.EventRetry, tracing.AttrDecision.String(string(e.Kind)),
			tracing.AttrDelayMS.Int64(e.Delay.Milliseconds()), tracing.AttrParked.Bool(a.parks(e.Delay)))
	case failure.EndGiveUp, failure.EndTimedOut:
		it.stepEvent(tracing.EventGiveUp, tracing.AttrDecision.String(string(e.Kind)),
			tracing.AttrOutcome.String(e.Outcome), tracing.AttrReason.String(e.Reason), tracing.AttrErrorClass.String(e.Class))
	case failure.EndContinue, failure.EndFallback:
		it.stepEvent(string(e.Kind), tracing.AttrDecision.String(string(e.Kind)))
	}
}

// traceDeadLetter records the dead-letter entry's storing.
func (a *Agent) traceDeadLetter(it *item) {
	if it.trace.item == nil {
		return
	}
	it.stepEvent(tracing.EventDeadLetter, tracing.AttrReason.String(it.st.Reason))
}

// traceOutcome records the item's outcome on the delivery's span.
func (a *Agent) traceOutcome(it *item, outcome string) {
	if it.trace.item == nil {
		return
	}
	it.trace.item.SetAttributes(tracing.AttrOutcome.String(outcome))
	if outcome != messages.OutcomeSucceeded {
		it.trace.item.SetStatus(codes.Error, outcome)
	}
}
