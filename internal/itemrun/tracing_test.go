package itemrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// traceHooks runs every tracing hook a delivery with a failed, retried
// step passes through.
func traceHooks(a *Agent, it *item, f *retry.Failure) {
	ctx := a.traceItem(context.Background(), it)
	sctx := a.traceStep(ctx, it, 0, 1)
	a.traceStepRan(it, f)
	a.traceBudget(it, budget.Grant{Granted: true})
	a.traceDecision(it, failure.End{Kind: failure.EndRetry, Delay: 10})
	a.traceOutcome(it, messages.OutcomeSucceeded)
	_ = sctx
	a.endItemTrace(it)
}

func tracedItem() *item {
	m := &recMsg{subject: "fleet.work.default.j"}
	return &item{m: m, set: &stepSet{steps: []messages.Step{{Shell: "true"}}}, wi: wire.WorkItem{JobID: "j", ItemID: "a"}}
}

// With tracing off (no TracerProvider), the hooks on an item's path
// allocate nothing.
func TestTracingOffAllocatesNothing(t *testing.T) {
	a := New(nil, Config{Name: "a1"})
	require.False(t, a.tr.On())
	it := tracedItem()
	f := &retry.Failure{Message: "boom"}
	require.Zero(t, testing.AllocsPerRun(100, func() { traceHooks(a, it, f) }))
}

// BenchmarkTracingOff measures the hooks of one delivery with tracing
// off: it must report 0 allocs/op.
func BenchmarkTracingOff(b *testing.B) {
	a := New(nil, Config{Name: "a1"})
	it := tracedItem()
	f := &retry.Failure{Message: "boom"}
	b.ReportAllocs()
	for b.Loop() {
		traceHooks(a, it, f)
	}
}
