package budget_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const bucket = "fleet_budget"

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newBucket(t testing.TB, js jetstream.JetStream, replicas int) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateOrUpdateKeyValue(testCtx(t, 30*time.Second), budget.BucketConfig(bucket, replicas))
	require.NoError(t, err)
	return kv
}

func newBudget(t testing.TB, kv jetstream.KeyValue, opts ...budget.Option) *budget.Budget {
	t.Helper()
	b, err := budget.New(kv, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

func TestCreateIsIdempotent(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	b := newBudget(t, newBucket(t, srv.JS(), 1))

	rec := budget.Effective(&messages.JobSpec{RetryBudget: budget.Count(3)}, 10, budget.Settings{})
	got, created, err := b.Create(ctx, "job-1", rec)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, rec, got)

	g, err := b.Claim(ctx, "job-1", 0)
	require.NoError(t, err)
	require.True(t, g.Granted)

	// A resubmission with other values neither resets nor replaces it.
	other := budget.Record{Total: 100, PerItemMax: 100}
	got, created, err = b.Create(ctx, "job-1", other)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 3, got.Total)
	require.Equal(t, 1, got.Consumed)

	_, err = b.Get(ctx, "nope")
	require.ErrorIs(t, err, budget.ErrNotFound)
	_, _, err = b.Create(ctx, "bad.id.x", rec)
	require.ErrorIs(t, err, budget.ErrInvalidJob)
	_, _, err = b.Create(ctx, "neg", budget.Record{Total: -1})
	require.ErrorIs(t, err, budget.ErrInvalidRecord)
}

func TestClaim(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	kv := newBucket(t, srv.JS(), 1)
	b := newBudget(t, kv)
	job := "claim"
	_, _, err := b.Create(ctx, job, budget.Record{Total: 3, PerItemMax: 2})
	require.NoError(t, err)

	// Per-item cap first: an item that has had 2 retries is denied
	// even though the job has units left.
	for retries := range 2 {
		g, err := b.Claim(ctx, job, retries)
		require.NoError(t, err)
		require.True(t, g.Granted)
		require.Nil(t, g.Deny)
	}
	g, err := b.Claim(ctx, job, 2)
	require.NoError(t, err)
	require.False(t, g.Granted)
	require.Equal(t, &budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 2, Limit: 2}, g.Deny)
	require.ErrorIs(t, g.Deny, budget.ErrExhausted)
	require.Equal(t, budget.ScopeItem, g.Deny.Scope())

	// The last job unit, then the job is exhausted.
	g, err = b.Claim(ctx, job, 0)
	require.NoError(t, err)
	require.True(t, g.Granted)
	g, err = b.Claim(ctx, job, 0)
	require.NoError(t, err)
	require.Equal(t, &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 3, Limit: 3}, g.Deny)
	require.Equal(t, budget.ScopeJob, g.Deny.Scope())
	require.EqualError(t, g.Deny, "budget: job_budget_exhausted (3 of 3 retries used)")

	rec, err := b.Get(ctx, job)
	require.NoError(t, err)
	require.Equal(t, 3, rec.Consumed)
	require.True(t, rec.Exhausted)

	// Exhaustion is remembered: later denials cost no KV request.
	before := b.Stats()
	for range 100 {
		g, err := b.Claim(ctx, job, 0)
		require.NoError(t, err)
		require.False(t, g.Granted)
	}
	require.Equal(t, before, b.Stats())
}

func TestClaimErrors(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	b := newBudget(t, newBucket(t, srv.JS(), 1))

	_, err := b.Claim(ctx, "missing", 0)
	require.ErrorIs(t, err, budget.ErrNotFound)
	_, err = b.Claim(ctx, "a.b.c", 0)
	require.ErrorIs(t, err, budget.ErrInvalidJob)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Claim(cancelled, "missing", 0)
	require.ErrorIs(t, err, context.Canceled)

	_, _, err = b.Create(ctx, "zero", budget.Effective(&messages.JobSpec{RetryBudget: budget.Count(0)}, 5, budget.Settings{}))
	require.NoError(t, err)
	g, err := b.Claim(ctx, "zero", 0)
	require.NoError(t, err)
	require.Equal(t, messages.ReasonItemBudget, g.Deny.Reason, "per-item cap 0 is checked first")

	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	_, err = b.Claim(ctx, "zero", 0)
	require.ErrorIs(t, err, budget.ErrClosed)
}

// Another process exhausts the job: the watch tells this one, whose later
// denials then cost neither a write nor a read.
func TestExhaustionLearnedFromWatch(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	kvA := newBucket(t, srv.JS(), 1)
	jsB, err := jetstream.New(srv.Connect(t))
	require.NoError(t, err)
	kvB, err := jsB.KeyValue(ctx, bucket)
	require.NoError(t, err)
	a := newBudget(t, kvA)
	b := newBudget(t, kvB)

	_, _, err = a.Create(ctx, "shared", budget.Record{Total: 5, PerItemMax: 5})
	require.NoError(t, err)
	g, err := b.Claim(ctx, "shared", 0) // b now follows the job
	require.NoError(t, err)
	require.True(t, g.Granted)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !budget.Watching(b) {
			return errors.New("watch not established")
		}
		return nil
	})
	for range 4 {
		g, err := a.Claim(ctx, "shared", 0)
		require.NoError(t, err)
		require.True(t, g.Granted)
	}
	g, err = a.Claim(ctx, "shared", 0)
	require.NoError(t, err)
	require.False(t, g.Granted)

	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, exhausted, _ := budget.Cached(b, "shared"); !exhausted {
			return errors.New("b has not seen the exhaustion yet")
		}
		return nil
	})
	// b learned it from the watch alone: one read and one write, both for
	// its own grant; its denials cost nothing.
	require.Equal(t, budget.Stats{Reads: 1, Writes: 1}, b.Stats())
	for range 50 {
		g, err := b.Claim(ctx, "shared", 0)
		require.NoError(t, err)
		require.Equal(t, &budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 5, Limit: 5}, g.Deny)
	}
	require.Equal(t, budget.Stats{Reads: 1, Writes: 1}, b.Stats())
}

func TestMetricsAndForget(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	reg := prometheus.NewRegistry()
	kv := newBucket(t, srv.JS(), 1)
	b := newBudget(t, kv, budget.WithRegisterer(reg))
	b2 := newBudget(t, kv, budget.WithRegisterer(reg)) // shares the collectors

	_, _, err := b.Create(ctx, "m", budget.Record{Total: 2, PerItemMax: 1})
	require.NoError(t, err)
	for _, retries := range []int{0, 1, 0, 0} { // granted, denied_item, granted, denied_job
		_, err := b.Claim(ctx, "m", retries)
		require.NoError(t, err)
	}
	_, err = b2.Claim(ctx, "m", 0)
	require.NoError(t, err)

	require.Equal(t, map[string]float64{
		"jetfleet_retry_budget_consumed_total":                   2,
		"jetfleet_retry_budget_claims_total{result=granted}":     2,
		"jetfleet_retry_budget_claims_total{result=denied_item}": 1,
		"jetfleet_retry_budget_claims_total{result=denied_job}":  2,
		"jetfleet_retry_budget_claims_total{result=error}":       0,
		"jetfleet_retry_budget_exhausted_total{scope=item}":      1,
		"jetfleet_retry_budget_exhausted_total{scope=job}":       1,
		"jetfleet_retry_budget_remaining{job_id=m}":              0,
	}, gather(t, reg))

	b.Forget("m")
	b2.Forget("m")
	require.NotContains(t, gather(t, reg), "jetfleet_retry_budget_remaining{job_id=m}")
}

// gather flattens a registry into "name{label=value}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[key] = m.Gauge.GetValue()
			}
		}
	}
	return got
}

// With WithLimits, a budget record rewritten by another client (any agent
// may write the bucket) grants no more than the limits the job's record
// holds: a job allowed 2 retries gets 2, whatever total the bucket claims.
// The warning about the rewritten record is logged once a minute, not
// once per claim, with the number held back.
func TestLimitsComeFromTheJobNotTheBucket(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t, 10*time.Second)
	kv := newBucket(t, srv.JS(), 1)
	var logs tamperLog
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := newBudget(t, kv, budget.WithLimits(func(job string) (int, int, bool) { return 2, 2, job == "job-1" }),
		budget.WithLogger(zerolog.New(&logs)), budget.WithClock(clk))
	_, _, err := b.Create(ctx, "job-1", budget.Record{Total: 2, PerItemMax: 2})
	require.NoError(t, err)

	forger := newBudget(t, kv)
	err = kv.Delete(ctx, "job-1")
	require.NoError(t, err)
	_, created, err := forger.Create(ctx, "job-1", budget.Record{Total: 1000, PerItemMax: 1000})
	require.NoError(t, err)
	require.True(t, created)

	var granted int
	for range 5 {
		g, err := b.Claim(ctx, "job-1", 0)
		require.NoError(t, err)
		if g.Granted {
			granted++
		}
	}
	require.Equal(t, 2, granted)
	require.Len(t, logs.read(), 1)

	// Rewritten again, exhausted by the job's limits: every claim is
	// denied from the record read, none writes it back.
	require.NoError(t, kv.Delete(ctx, "job-1"))
	_, _, err = forger.Create(ctx, "job-1", budget.Record{Total: 1000, PerItemMax: 1000, Consumed: 500})
	require.NoError(t, err)
	require.Eventually(t, func() bool { rec, _, _ := budget.Cached(b, "job-1"); return rec.Total == 1000 }, 5*time.Second, 5*time.Millisecond)
	for range 5 {
		g, err := b.Claim(ctx, "job-1", 0)
		require.NoError(t, err)
		require.False(t, g.Granted)
	}
	warnings := logs.read()
	require.Len(t, warnings, 1, "10 claims on rewritten records within a minute: one warning")
	require.Equal(t, 0, warnings[0].Suppressed)

	clk.Advance(budget.TamperWarnInterval)
	_, err = b.Claim(ctx, "job-1", 0)
	require.NoError(t, err)
	warnings = logs.read()
	require.Len(t, warnings, 2, "a minute later, one more")
	require.GreaterOrEqual(t, warnings[1].Suppressed, 5, "the claims since the first warning were counted")
	require.Equal(t, 1000, warnings[1].StoredTotal)
}

// tamperWarning is what a Budget logs about a record whose limits are not
// the job's.
type tamperWarning struct {
	Message     string `json:"message"`
	StoredTotal int    `json:"stored_total"`
	Suppressed  int    `json:"suppressed"`
}

// tamperLog keeps the tamper warnings of the log lines written to it (one
// a Write, as zerolog writes them), from any goroutine.
type tamperLog struct {
	mu       sync.Mutex
	warnings []tamperWarning
}

func (l *tamperLog) Write(line []byte) (int, error) {
	var w tamperWarning
	if json.Unmarshal(line, &w) == nil && strings.Contains(w.Message, "limits are not the job's") {
		l.mu.Lock()
		l.warnings = append(l.warnings, w)
		l.mu.Unlock()
	}
	return len(line), nil
}

func (l *tamperLog) read() []tamperWarning {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.warnings)
}

func TestKeys(t *testing.T) {
	require.Equal(t, "gpu.job-1", budget.Key("gpu", "job-1"))
	pool, job := budget.SplitKey("gpu.job-1")
	require.Equal(t, []string{"gpu", "job-1"}, []string{pool, job})
	pool, job = budget.SplitKey("job-1")
	require.Equal(t, []string{"", "job-1"}, []string{pool, job})
}

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int
		items map[string]int64
		want  map[string]int
	}{
		{"one pool", 20, map[string]int64{"a": 7}, map[string]int{"a": 20}},
		{"by items", 10, map[string]int64{"a": 30, "b": 10}, map[string]int{"a": 8, "b": 2}},
		{"largest remainder", 10, map[string]int64{"a": 1, "b": 1, "c": 1}, map[string]int{"a": 4, "b": 3, "c": 3}},
		{"a pool without items", 5, map[string]int64{"a": 0, "b": 4}, map[string]int{"a": 0, "b": 5}},
		{"no retries", 0, map[string]int64{"a": 1, "b": 1}, map[string]int{"a": 0, "b": 0}},
		{"no items", 3, map[string]int64{"a": 0}, map[string]int{"a": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budget.Shares(tc.total, tc.items)
			require.Equal(t, tc.want, got)
			sum := 0
			for _, n := range got {
				sum += n
			}
			require.LessOrEqual(t, sum, tc.total)
		})
	}
}
