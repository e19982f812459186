// Command benchui measures the dashboard's page latency on a large fleet:
// an embedded JetStream server (file storage) holding -jobs job records
// and -dlq dead letters, a coordinator, and the dashboard. It times each
// page and the API calls behind it (-n sequential requests each, after a
// warm-up) and prints p50, p99 and max as a Markdown table, with raw
// JetStream reads and the old full-scan job listing as references.
//
//	go run ./scripts/benchui -jobs 10000 -dlq 100000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/ui"
	"github.com/jetfleet/jetfleet/internal/wire"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func main() {
	jobs := flag.Int("jobs", 10000, "job records")
	dead := flag.Int("dlq", 100000, "dead letters")
	dlqJobs := flag.Int("dlq-jobs", 100, "jobs the dead letters belong to")
	results := flag.Int("results", 20000, "results of the job whose page is timed")
	n := flag.Int("n", 200, "timed requests per target")
	flag.Parse()
	if err := run(*jobs, *dead, *dlqJobs, *results, *n); err != nil {
		fmt.Fprintln(os.Stderr, "benchui:", err)
		os.Exit(1)
	}
}

func run(jobs, dead, dlqJobs, results, n int) error {
	srv, err := embedded.Start(embedded.Options{}) // in a temporary directory Shutdown removes
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := messages.MustNames("")
	prov := provision.Config{DLQMaxBytes: 1 << 30}
	if err := provision.Ensure(ctx, js, names, prov); err != nil {
		return err
	}
	fmt.Printf("machine: %d CPUs, %s; %d job records, %d dead letters over %d jobs, %d results of one job; file storage\n\n",
		runtime.NumCPU(), runtime.Version(), jobs, dead, dlqJobs, results)

	t0 := time.Now()
	if err := loadJobs(ctx, js, names, jobs); err != nil {
		return err
	}
	if err := loadDLQ(ctx, js, names, dead, dlqJobs); err != nil {
		return err
	}
	if err := loadResults(ctx, js, names, "job-00042", results); err != nil {
		return err
	}
	fmt.Printf("loaded in %s\n\n", time.Since(t0).Round(time.Millisecond))

	coord, err := coordinator.New(nc, coordinator.Config{Provision: coordinator.Provision(prov)})
	if err != nil {
		return err
	}
	coordDone := make(chan error, 1)
	started := time.Now()
	go func() { coordDone <- coord.Run(ctx) }()
	<-coord.Ready()
	client, err := jfclient.New(nc, "")
	if err != nil {
		return err
	}
	// The job index is loaded when jobs.list answers with every job.
	for {
		r, err := client.JobListPage(ctx, messages.ListRequest{Limit: 1})
		if err == nil && r.Total == jobs {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("coordinator ready and its job index loaded in %s\n\n", time.Since(started).Round(time.Millisecond))

	dash, err := ui.New(nc, ui.Config{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = dash.Serve(ctx, ln) }()
	base := "http://" + dash.Addr().String()
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: time.Minute, Jar: jar}
	if err := get(hc, dash.LoginURL(base)); err != nil { // the login cookie
		return err
	}

	// The first load of a job page reads its results (bounded per
	// request); later loads read only what is new.
	first := time.Now()
	if err := get(hc, base+"/jobs/job-00042"); err != nil {
		return err
	}
	fmt.Printf("first load of /jobs/job-00042 (reads up to 20,000 of its %d results): %s\n\n", results, time.Since(first).Round(time.Millisecond))

	page, err := client.DLQList(ctx, messages.DLQFilter{Limit: 1, AfterSeq: uint64(dead / 2)})
	if err != nil || len(page.Entries) == 0 {
		return fmt.Errorf("no DLQ entry in the middle: %v", err)
	}
	mid := page.Entries[0].Seq
	kv, err := js.KeyValue(ctx, names.JobsBucket())
	if err != nil {
		return err
	}
	dlqStream, err := js.Stream(ctx, names.DLQStream())
	if err != nil {
		return err
	}

	type target struct {
		name string
		fn   func() error
	}
	page1 := func(path string) func() error { return func() error { return get(hc, base+path) } }
	api := func(endpoint string, req any) func() error {
		return func() error { return client.Call(ctx, endpoint, req, nil) }
	}
	targets := []target{
		{"page `/`", page1("/")},
		{"page `/?state=failed`", page1("/?state=failed")},
		{"page `/?q=nightly-0999` (text filter)", page1("/?q=nightly-0999")},
		{"page `/jobs/job-00042` (warm)", page1("/jobs/job-00042")},
		{"page `/dlq`", page1("/dlq")},
		{"page `/dlq?job=dlq-007`", page1("/dlq?job=dlq-007")},
		{"page `/dlq?error_class=timeout`", page1("/dlq?error_class=timeout")},
		{"page `/dlq?text=needle` (1 in 1000 match)", page1("/dlq?text=needle")},
		{fmt.Sprintf("page `/dlq?after=%d` (deep page)", mid), page1(fmt.Sprintf("/dlq?after=%d", mid))},
		{fmt.Sprintf("page `/dlq/%d`", mid), page1(fmt.Sprintf("/dlq/%d", mid))},
		{"page `/agents`", page1("/agents")},
		{"api `jobs.list` {limit 50}", api(messages.EndpointJobsList, messages.ListRequest{Limit: 50})},
		{"api `jobs.list` {state failed, limit 50}", api(messages.EndpointJobsList, messages.ListRequest{State: messages.StateFailed, Limit: 50})},
		{"api `jobs.list` {text, limit 50}", api(messages.EndpointJobsList, messages.ListRequest{Text: "nightly-0999", Limit: 50})},
		{"api `jobs.status`", api(messages.EndpointJobsStatus, messages.JobRequest{JobID: "job-00042"})},
		{"api `dlq.list` {limit 50}", api(messages.EndpointDLQList, messages.DLQFilter{Limit: 50})},
		{"api `dlq.list` {job, limit 50}", api(messages.EndpointDLQList, messages.DLQFilter{JobID: "dlq-007", Limit: 50})},
		{"api `dlq.list` {text needle, limit 50}", api(messages.EndpointDLQList, messages.DLQFilter{Text: "needle", Limit: 50})},
		{"api `dlq.get`", api(messages.EndpointDLQGet, messages.DLQGetRequest{Seq: mid})},
		{"raw KV get of one job record", func() error { _, err := kv.Get(ctx, "job-00042"); return err }},
		{"raw stream get of one DLQ entry", func() error { _, err := dlqStream.GetMsg(ctx, mid); return err }},
	}
	fmt.Printf("%d requests each, one at a time, after 5 warm-up requests:\n\n", n)
	fmt.Println("| target | p50 | p99 | max |")
	fmt.Println("|---|---:|---:|---:|")
	for _, t := range targets {
		p50, p99, worst, err := timeIt(n, t.fn)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		fmt.Printf("| %s | %s | %s | %s |\n", t.name, ms(p50), ms(p99), ms(worst))
	}
	// What jobs.list cost before the index: every record read from KV.
	p50, p99, worst, err := timeIt(5, func() error { return fullScan(ctx, kv) })
	if err != nil {
		return err
	}
	fmt.Printf("| reference: read all %d job records (what jobs.list did per call before) | %s | %s | %s |\n", jobs, ms(p50), ms(p99), ms(worst))

	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	fmt.Printf("\nheap in use after the run (server, coordinator and dashboard in one process): %d MiB\n", mem.HeapInuse>>20)
	cancel()
	<-coordDone
	return nil
}

func get(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func timeIt(n int, fn func() error) (p50, p99, worst time.Duration, err error) {
	for range 5 {
		if err := fn(); err != nil {
			return 0, 0, 0, err
		}
	}
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		if err := fn(); err != nil {
			return 0, 0, 0, err
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[n/2], d[min(n-1, n*99/100)], d[n-1], nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func fullScan(ctx context.Context, kv jetstream.KeyValue) error {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range lister.Keys() {
		if _, err := kv.Get(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// loadJobs writes job records as the coordinator does: finished jobs
// (a finished job is not resumed), every tenth failed.
func loadJobs(ctx context.Context, js jetstream.JetStream, names messages.Names, n int) error {
	kv, err := js.KeyValue(ctx, names.JobsBucket())
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range n {
		id := fmt.Sprintf("job-%05d", i)
		state := messages.StateSucceeded
		if i%10 == 0 {
			state = messages.StateFailed
		}
		started, finished := now.Add(-time.Duration(n-i)*time.Minute), now.Add(-time.Duration(n-i)*time.Minute+30*time.Second)
		rec := wire.JobRecord{
			Spec: &messages.JobSpec{ID: id, Name: fmt.Sprintf("nightly-%04d", i%2000), Pool: messages.DefaultPool,
				AgentTemplate: []messages.Step{{Handler: "resize", With: map[string]any{"bucket": "photos"}}}},
			Status: messages.JobStatus{ID: id, Name: fmt.Sprintf("nightly-%04d", i%2000), Pool: messages.DefaultPool, State: state,
				Items: 1000, Published: 1000, Succeeded: 990, DeadLettered: 10, Retries: 40, CompletionReason: messages.CompletionAllCompleted,
				Budget:      messages.BudgetStatus{Total: 100, Consumed: 40},
				SubmittedAt: started, StartedAt: &started, FinishedAt: &finished, Phase: messages.PhaseDone,
				Errors: []messages.ErrorSummary{{Signature: "3fa2b1c0d9e8f7a6", Class: "timeout", Message: "upstream timed out", Count: 10, Items: []string{"a", "b", "c"}}}},
			Cursor: 1000,
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, id, data); err != nil {
			return err
		}
	}
	return nil
}

// loadDLQ publishes dead letters spread over jobs; one in a thousand has
// "needle" in its error.
func loadDLQ(ctx context.Context, js jetstream.JetStream, names messages.Names, n, jobs int) error {
	classes := []string{"network", "timeout", "server_error", "error"}
	now := time.Now().UTC()
	for i := range n {
		job := fmt.Sprintf("dlq-%03d", i%jobs)
		msg := fmt.Sprintf("GET https://img.example/%d: connection reset by peer", i)
		if i%1000 == 999 {
			msg = "a needle in the haystack"
		}
		e := messages.DLQEntry{
			JobID: job, ItemID: fmt.Sprintf("img-%06d", i), Index: int64(i), Pool: messages.DefaultPool,
			Payload:       json.RawMessage(fmt.Sprintf(`{"id":"img-%06d","path":"/uploads/%06d.jpg","size":%d}`, i, i, 1000+i)),
			CorrelationID: fmt.Sprintf("%s:%d", job, i), Subject: names.WorkSubject(messages.DefaultPool, job), StreamSeq: uint64(i + 1),
			Reason: messages.ReasonAttempts, Error: msg, ErrorClass: classes[i%len(classes)], Signature: fmt.Sprintf("%016x", i%37),
			DeadLetteredAt: now.Add(-time.Duration(n-i) * time.Second), Agent: "agent-1",
		}
		for a := 1; a <= 3; a++ {
			e.Attempts = append(e.Attempts, messages.Attempt{Attempt: a, Step: 0, StepName: "fetch", Agent: "agent-1",
				Time: e.DeadLetteredAt.Add(time.Duration(a-3) * time.Second), DurationMS: 120, ErrorClass: e.ErrorClass,
				Message: msg, Decision: "retry", DelayMS: 1000})
		}
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		m := nats.NewMsg(names.DLQSubject(messages.DefaultPool, job))
		m.Data = data
		m.Header.Set(messages.HeaderJobID, job)
		m.Header.Set(messages.HeaderReason, e.Reason)
		if err := publishAsync(js, func() error { _, err := js.PublishMsgAsync(m); return err }); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("DLQ publishes not acknowledged")
	}
}

// loadResults publishes a job's results, as agents do.
func loadResults(ctx context.Context, js jetstream.JetStream, names messages.Names, job string, n int) error {
	now := time.Now().UTC()
	for i := range n {
		r := messages.Result{JobID: job, ItemID: fmt.Sprintf("img-%06d", i), Index: int64(i), Outcome: messages.OutcomeSucceeded,
			Attempts: 1 + i%3, Retries: i % 3, Agent: "agent-1", FinishedAt: now.Add(time.Duration(i-n) * 10 * time.Millisecond), DurationMS: int64(5 + i%200)}
		data, _ := json.Marshal(r)
		if err := publishAsync(js, func() error {
			_, err := js.PublishAsync(names.ResultSubject(messages.DefaultPool, job), data)
			return err
		}); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("results not acknowledged")
	}
}

// publishAsync publishes, waiting for the outstanding acknowledgements and
// trying again when too many are outstanding (a busy machine).
func publishAsync(js jetstream.JetStream, publish func() error) error {
	for tries := 0; ; tries++ {
		err := publish()
		if err == nil || !errors.Is(err, jetstream.ErrTooManyStalledMsgs) || tries == 10 {
			return err
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
		}
	}
}
