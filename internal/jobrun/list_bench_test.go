package jobrun

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// BenchmarkJobsList measures a jobs.list page (100 summaries, over NATS,
// through the micro service) with many jobs in the index, against a raw
// JetStream KV Get of one job record in the same run: list/kv_get is the
// ratio (docs/benchmarks.md). A page costs O(log n + page), so the ratio
// stays flat as the jobs grow.
func BenchmarkJobsList(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			srv := fleettest.RunServer(b)
			c, err := New(srv.Connect(b), Config{Provision: Provision(testProv)})
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			<-c.Ready()
			require.NoError(b, c.index.wait(ctx))
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range n {
				st := messages.JobStatus{ID: fmt.Sprintf("job-%06d", i), State: messages.StateSucceeded, Pool: "default",
					Items: 100, Succeeded: 100, SubmittedAt: t0.Add(time.Duration(i) * time.Second)}
				c.index.put(1, &st)
			}
			rec := wire.JobRecord{Status: messages.JobStatus{ID: "raw", State: messages.StateSucceeded}}
			require.NoError(b, c.store.put(ctx, &rec))
			cl, err := NewClient(srv.Connect(b), "")
			require.NoError(b, err)
			var list, get time.Duration
			b.ResetTimer()
			for range b.N {
				s := time.Now()
				page, err := cl.ListPage(ctx, messages.ListRequest{State: messages.StateSucceeded})
				list += time.Since(s)
				if err != nil || len(page.Jobs) != DefaultListLimit {
					b.Fatalf("page: %v, %d jobs", err, len(page.Jobs))
				}
				s = time.Now()
				if _, err := c.store.kv.Get(ctx, "raw"); err != nil {
					b.Fatal(err)
				}
				get += time.Since(s)
			}
			b.ReportMetric(float64(list.Microseconds())/float64(b.N), "list_us/op")
			b.ReportMetric(float64(get.Microseconds())/float64(b.N), "kv_get_us/op")
			b.ReportMetric(float64(list)/float64(get), "list/kv_get")
		})
	}
}
