package jobrun

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// BenchmarkSpecWrite measures what keeping specs apart costs a job when
// its runner starts: writeSpecs for a job of one pool and of three (a
// group_by job routed to three pools), against a raw JetStream KV Put of
// the job's record in the same run (specs/kv_put, docs/benchmarks.md).
func BenchmarkSpecWrite(b *testing.B) {
	for _, pools := range []int{1, 3} {
		b.Run(fmt.Sprintf("pools=%d", pools), func(b *testing.B) {
			srv := fleettest.RunServer(b)
			c, err := New(srv.Connect(b), Config{Provision: Provision(testProv)})
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			<-c.Ready()
			items := make([]json.RawMessage, 10)
			for i := range items {
				items[i] = json.RawMessage(fmt.Sprintf(`{"id": "%d"}`, i))
			}
			rec := wire.JobRecord{
				Spec:   &messages.JobSpec{ID: "bench", Pool: "p0", Items: items, AgentTemplate: []messages.Step{{Shell: "echo ${item.id}"}}},
				Status: messages.JobStatus{ID: "bench", State: messages.StateRunning, Budget: messages.BudgetStatus{Total: 20}},
			}
			for i := 1; i < pools; i++ {
				if rec.Routes == nil {
					rec.Routes = map[string]string{}
				}
				rec.Routes[fmt.Sprintf("g%d", i)] = fmt.Sprintf("p%d", i)
			}
			require.NoError(b, c.writeSpecs(ctx, &rec)) // the buckets exist from here on
			var specs, put time.Duration
			b.ResetTimer()
			for range b.N {
				s := time.Now()
				if err := c.writeSpecs(ctx, &rec); err != nil {
					b.Fatal(err)
				}
				specs += time.Since(s)
				s = time.Now()
				if err := c.store.put(ctx, &rec); err != nil {
					b.Fatal(err)
				}
				put += time.Since(s)
			}
			b.ReportMetric(float64(specs.Microseconds())/float64(b.N), "specs_us/op")
			b.ReportMetric(float64(put.Microseconds())/float64(b.N), "kv_put_us/op")
			b.ReportMetric(float64(specs)/float64(put), "specs/kv_put")
		})
	}
}
