package budget_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

// Run with scripts/bench-budget.sh, or:
//
//	go test -run '^$' -bench BenchmarkBudget -benchtime=1x ./internal/budget/
//
// BUDGET_BENCH_DURATION sets how long each contention measurement runs
// (default 3s).

func benchDuration(b *testing.B) time.Duration {
	if s := os.Getenv("BUDGET_BENCH_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(b, err)
		return d
	}
	return 3 * time.Second
}

// naiveClaim is the obvious implementation: read the record, add one,
// compare-and-set, start over on a conflict.
func naiveClaim(ctx context.Context, kv jetstream.KeyValue, job string) (bool, error) {
	for {
		e, err := kv.Get(ctx, job)
		if err != nil {
			return false, err
		}
		var rec budget.Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return false, err
		}
		if rec.Consumed >= rec.Total {
			return false, nil
		}
		rec.Consumed++
		rec.Exhausted = rec.Consumed >= rec.Total
		data, err := json.Marshal(rec)
		if err != nil {
			return false, err
		}
		if _, err := kv.Update(ctx, job, data, e.Revision()); err == nil {
			return true, nil
		} else if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, err
		}
	}
}

// throughput runs claimers goroutines calling claim for d and returns the
// granted claims per second.
func throughput(b *testing.B, claimers int, d time.Duration, claim func(ctx context.Context) (bool, error)) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	var grants atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range claimers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ok, err := claim(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if !ok {
					b.Error("budget ran out during a throughput run")
					return
				}
				grants.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(grants.Load()) / time.Since(start).Seconds()
}

// BenchmarkBudgetContention: 64 concurrent claimers on one job whose budget
// does not run out, on the same embedded server: the naive Get+Update loop,
// then internal/budget (one process, coalescing), four processes of 16, and one
// process with coalescing off.
func BenchmarkBudgetContention(b *testing.B) {
	srv := natstest.RunServer(b)
	kv := newBucket(b, srv.JS(), 1)
	ctx := testCtx(b, 10*time.Minute)
	d := benchDuration(b)
	const claimers = 64
	big := budget.Record{Total: budget.MaxUnits, PerItemMax: budget.MaxUnits}
	for i := range b.N {
		jobNaive, jobOne, jobFour := fmt.Sprintf("naive-%d", i), fmt.Sprintf("one-%d", i), fmt.Sprintf("four-%d", i)
		setup := newBudget(b, kv)
		for _, job := range []string{jobNaive, jobOne, jobFour} {
			_, _, err := setup.Create(ctx, job, big)
			require.NoError(b, err)
		}

		naive := throughput(b, claimers, d, func(ctx context.Context) (bool, error) {
			return naiveClaim(ctx, kv, jobNaive)
		})

		one := newBudget(b, kv)
		single := throughput(b, claimers, d, func(ctx context.Context) (bool, error) {
			g, err := one.Claim(ctx, jobOne, 0)
			return g.Granted, err
		})

		var procs []*budget.Budget
		for range 4 {
			js, err := jetstream.New(srv.Connect(b))
			require.NoError(b, err)
			pkv, err := js.KeyValue(ctx, bucket)
			require.NoError(b, err)
			procs = append(procs, newBudget(b, pkv, budget.WithJetStream(js)))
		}
		var next atomic.Int64
		four := throughput(b, claimers, d, func(ctx context.Context) (bool, error) {
			// Spread the calls over the four processes, 16 claimers each on average.
			g, err := procs[next.Add(1)%4].Claim(ctx, jobFour, 0)
			return g.Granted, err
		})

		rec, err := one.Get(ctx, jobOne)
		require.NoError(b, err)
		st := one.Stats()
		fmt.Printf("contention, %d claimers, %v each, one job:\n", claimers, d)
		fmt.Printf("  naive Get+Update loop          %9.0f claims/s\n", naive)
		fmt.Printf("  internal/budget, 1 process          %9.0f claims/s  (%.1fx naive; %d claims in %d KV writes, %.0f claims/write)\n",
			single, single/naive, rec.Consumed, st.Writes, float64(rec.Consumed)/float64(max(st.Writes, 1)))
		st4 := sumStats(procs)
		fmt.Printf("  internal/budget, 4 processes x 16   %9.0f claims/s  (%.1fx naive; %d KV write attempts, %d conflicts, %d reads)\n",
			four, four/naive, st4.Writes, st4.Conflicts, st4.Reads)
		b.ReportMetric(naive, "naive_claims/s")
		b.ReportMetric(single, "budget_claims/s")
		b.ReportMetric(single/naive, "speedup")
		b.ReportMetric(four, "budget_4proc_claims/s")
	}
}

// storm fires n simultaneous claims (one per failed item) spread over the
// given Budgets and returns the grants and the elapsed time.
func storm(ctx context.Context, b *testing.B, job string, n int, procs []*budget.Budget) (int, time.Duration) {
	var grants atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		p := procs[i%len(procs)]
		wg.Go(func() {
			<-start
			g, err := p.Claim(ctx, job, 0)
			if err != nil {
				b.Error(err)
				return
			}
			if g.Granted {
				grants.Add(1)
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return int(grants.Load()), time.Since(t0)
}

func sumStats(procs []*budget.Budget) budget.Stats {
	var s budget.Stats
	for _, p := range procs {
		x := p.Stats()
		s.Reads += x.Reads
		s.Writes += x.Writes
		s.Conflicts += x.Conflicts
		s.Errors += x.Errors
	}
	return s
}

// BenchmarkBudgetStorm: 10,000 simultaneous failures against a budget of
// 50, from one process and from four; then 10,000 more failures on the
// exhausted job. Grants must be exactly 50; writes after exhaustion 0.
func BenchmarkBudgetStorm(b *testing.B) {
	srv := natstest.RunServer(b)
	kv := newBucket(b, srv.JS(), 1)
	ctx := testCtx(b, 10*time.Minute)
	const failures, total = 10_000, 50
	for i := range b.N {
		for _, nproc := range []int{1, 4} {
			job := fmt.Sprintf("storm-%d-%d", i, nproc)
			var procs []*budget.Budget
			for range nproc {
				js, err := jetstream.New(srv.Connect(b))
				require.NoError(b, err)
				pkv, err := js.KeyValue(ctx, bucket)
				require.NoError(b, err)
				procs = append(procs, newBudget(b, pkv, budget.WithJetStream(js)))
			}
			created, _, err := procs[0].Create(ctx, job, budget.Record{Total: total, PerItemMax: 3})
			require.NoError(b, err)
			require.False(b, created.Exhausted)
			first, err := kv.Get(ctx, job)
			require.NoError(b, err)
			before := sumStats(procs)

			grants, took := storm(ctx, b, job, failures, procs)
			after := sumStats(procs)
			last, err := kv.Get(ctx, job)
			require.NoError(b, err)
			var rec budget.Record
			require.NoError(b, json.Unmarshal(last.Value(), &rec))
			require.Equal(b, total, grants, "grants")
			require.Equal(b, total, rec.Consumed, "KV consumed")
			require.True(b, rec.Exhausted)

			// The job is exhausted: 10,000 more failures.
			grants2, took2 := storm(ctx, b, job, failures, procs)
			again := sumStats(procs)
			require.Zero(b, grants2)

			fmt.Printf("storm, %d simultaneous failures, budget %d, %d process(es):\n", failures, total, nproc)
			fmt.Printf("  %d grants in %v; KV: %d successful writes (revision %d -> %d), %d write attempts (%d conflicts), %d reads\n",
				grants, took.Round(time.Microsecond), last.Revision()-first.Revision(), first.Revision(), last.Revision(),
				after.Writes-before.Writes, after.Conflicts-before.Conflicts, after.Reads-before.Reads)
			fmt.Printf("  then %d more failures on the exhausted job: %d grants in %v; KV writes %d, reads %d\n",
				failures, grants2, took2.Round(time.Microsecond), again.Writes-after.Writes, again.Reads-after.Reads)
			b.ReportMetric(float64(last.Revision()-first.Revision()), fmt.Sprintf("writes_%dproc", nproc))
			b.ReportMetric(float64(again.Writes-after.Writes), fmt.Sprintf("writes_after_exhaustion_%dproc", nproc))
			b.ReportMetric(took.Seconds()*1000, fmt.Sprintf("storm_ms_%dproc", nproc))
		}
	}
}
