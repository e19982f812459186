// Command bench measures jetfleet's end-to-end throughput against raw
// JetStream on the same embedded server, in one process and one run:
//
//	(a) raw: async-publish N messages to a WorkQueue stream, then consume
//	    and ack them with nats.go. The "plain" pipeline (the headline) is
//	    what `nats bench js` does: no Nats-Msg-Id, a consumer and a
//	    Consume call with the client's defaults. The "handicapped" one
//	    adds what jetfleet itself needs (a Nats-Msg-Id per message, so the
//	    server dedupes, and the agents' prefetch): it is printed as a
//	    second line, never as the baseline;
//	(b) jetfleet: a job of N items with one no-op Go handler, submitted
//	    through the API to a coordinator and agents, until it is done.
//
// It prints items/s for both and, last, "jetfleet/raw ratio: X.XX". It can
// also measure the coordinator's peak heap while expanding an input file.
//
//	go run ./scripts/bench -n 100000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var profilePath string

func main() {
	n := flag.Int("n", 100000, "items")
	agents := flag.Int("agents", 2, "in-process agents")
	conc := flag.Int("concurrency", 64, "concurrency per agent")
	prefetch := flag.Int("prefetch", 256, "prefetch per agent (and raw consumer)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the jetfleet phase to this file")
	runs := flag.Int("runs", 3, "alternating raw/jetfleet runs; medians are compared")
	server := flag.String("server", "", "with -raw-only: measure raw JetStream on this server instead of an embedded one")
	rawOnly := flag.Bool("raw-only", false, "measure raw JetStream once on -server and print its rate (scripts/bench-daemons.sh)")
	rawMode := flag.String("raw-mode", "plain", "with -raw-only: plain (no msg id, client default pull options) or handicapped (msg id per message, -prefetch)")
	replicas := flag.Int("replicas", 1, "with -raw-only: replicas of the raw stream (3 on a 3-node cluster, as the coordinator's --replicas)")
	flag.Parse()
	profilePath = *cpuprofile
	if *rawOnly {
		if *rawMode != "plain" && *rawMode != "handicapped" && *rawMode != "overlapped" {
			fmt.Fprintf(os.Stderr, "bench: -raw-mode: want plain, handicapped or overlapped, got %q\n", *rawMode)
			os.Exit(2)
		}
		rate, err := rawPipeline(*server, *n, *prefetch, *replicas, int(time.Now().UnixNano()%1e6), *rawMode == "handicapped", *rawMode == "overlapped")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: raw:", err)
			os.Exit(1)
		}
		fmt.Printf("raw JetStream: %.0f msgs/s\n", rate)
		return
	}
	if err := run(*n, *agents, *conc, *prefetch, max(1, *runs)); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, agents, conc, prefetch, runs int) error {
	dir, err := os.MkdirTemp("", "jetfleet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Printf("machine: %d CPUs, %s; N = %d; file storage\n", runtime.NumCPU(), runtime.Version(), n)

	// The machine is shared and noisy: alternate the two and compare medians.
	var raws, hands, fleets []float64
	for r := 0; r < runs; r++ {
		rawRate, err := raw(srv.URL(), n, prefetch, 1, 2*r, false)
		if err != nil {
			return fmt.Errorf("raw: %w", err)
		}
		fmt.Printf("run %d raw JetStream : %8.0f msgs/s  (plain: publish async + consume/ack, client defaults)\n", r+1, rawRate)
		handRate, err := raw(srv.URL(), n, prefetch, 1, 2*r+1, true)
		if err != nil {
			return fmt.Errorf("raw (handicapped): %w", err)
		}
		fmt.Printf("run %d raw, handicap : %8.0f msgs/s  (with a Nats-Msg-Id per message and prefetch %d)\n", r+1, handRate, prefetch)
		hands = append(hands, handRate)
		fleetRate, err := fleet(srv.URL(), dir, n, agents, conc, prefetch, r)
		if err != nil {
			return fmt.Errorf("jetfleet: %w", err)
		}
		fmt.Printf("run %d jetfleet job  : %8.0f items/s (no-op handler, %d agents x %d)\n", r+1, fleetRate, agents, conc)
		raws, fleets = append(raws, rawRate), append(fleets, fleetRate)
	}
	rm, hm, fm := median(raws), median(hands), median(fleets)
	fmt.Printf("median raw %.0f msgs/s (handicapped %.0f), median jetfleet %.0f items/s over %d runs\n", rm, hm, fm, runs)
	fmt.Printf("jetfleet/raw (handicapped) ratio: %.2f\n", fm/hm)
	fmt.Printf("jetfleet/raw ratio: %.2f\n", fm/rm)
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// payload is a work item of about the size jetfleet publishes.
func payload(i int) []byte {
	b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("item-%07d", i), "path": fmt.Sprintf("photos/%07d.jpg", i)})
	return b
}

// raw measures the raw pipeline once. With handicap false it is the plain
// pipeline: no message id, the consumer's and Consume's default options.
// With handicap true each message carries a Nats-Msg-Id (the server keeps
// it in the dedupe window, as it does for jetfleet's work items) and the
// consumer pulls prefetch messages at a time.
func raw(url string, n, prefetch, replicas, run int, handicap bool) (float64, error) {
	return rawPipeline(url, n, prefetch, replicas, run, handicap, false)
}

// rawPipeline is raw; with overlapped the consumer runs while the messages
// are published, as a job's agents run while its coordinator publishes,
// instead of after the last PubAck.
func rawPipeline(url string, n, prefetch, replicas, run int, handicap, overlapped bool) (float64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	ctx := context.Background()
	name := fmt.Sprintf("RAW%d", run)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{fmt.Sprintf("raw%d.>", run)}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		return 0, err
	}
	cc := jetstream.ConsumerConfig{Durable: "raw"}
	if handicap {
		cc.MaxAckPending = 20000
	}
	cons, err := st.CreateConsumer(ctx, cc)
	if err != nil {
		return 0, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	var opts []jetstream.PullConsumeOpt
	if handicap {
		opts = append(opts, jetstream.PullMaxMessages(prefetch))
	}
	var consuming jetstream.ConsumeContext
	consume := func() error {
		var err error
		consuming, err = cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			if got.Add(1) == int64(n) {
				close(done)
			}
		}, opts...)
		return err
	}
	defer func() {
		if consuming != nil {
			consuming.Stop()
		}
	}()
	start := time.Now()
	if overlapped {
		if err := consume(); err != nil {
			return 0, err
		}
	}
	for i := 0; i < n; i++ {
		m := nats.NewMsg(fmt.Sprintf("raw%d.default.job", run))
		m.Data = payload(i)
		if handicap {
			m.Header.Set(messages.HeaderMsgID, fmt.Sprintf("raw/%d", i))
		}
		// On a loaded machine or a cluster PubAcks can lag 4,096 messages
		// behind for longer than the default 200ms stall wait: wait (the
		// time counts) rather than fail the run.
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("publish did not complete")
	}
	if !overlapped {
		if err := consume(); err != nil {
			return 0, err
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("consumed %d of %d", got.Load(), n)
	}
	rate := float64(n) / time.Since(start).Seconds()
	consuming.Stop()
	_ = js.DeleteStream(ctx, name)
	return rate, nil
}

func fleet(url, dir string, n, agents, conc, prefetch, run int) (float64, error) {
	input := filepath.Join(dir, "items.json")
	f, err := os.Create(input)
	if err != nil {
		return 0, err
	}
	f.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			f.WriteString(",")
		}
		f.Write(payload(i))
	}
	f.WriteString("]}")
	if err := f.Close(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := []*nats.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	connect := func() (*nats.Conn, error) {
		c, err := nats.Connect(url)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	prov := provision.Config{MaxAckPending: 50000}
	cnc, err := connect()
	if err != nil {
		return 0, err
	}
	coord, err := coordinator.New(cnc, coordinator.Config{Provision: coordinator.Provision(prov), PublishBatch: 2048, StatusInterval: 100 * time.Millisecond, InputDir: dir})
	if err != nil {
		return 0, err
	}
	errs := make(chan error, agents+1)
	go func() { errs <- coord.Run(ctx) }()
	<-coord.Ready()
	for i := 0; i < agents; i++ {
		anc, err := connect()
		if err != nil {
			return 0, err
		}
		a := agent.New(anc, testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("bench-%d", i), Concurrency: conc, Prefetch: prefetch}, testhooks.Agent{Provision: prov})).
			Handle("noop", func(context.Context, *agent.Call) (any, error) { return nil, nil })
		go func() { errs <- a.Run(ctx) }()
	}
	client, _ := jfclient.New(cnc, "")
	if profilePath != "" {
		pf, err := os.Create(profilePath)
		if err != nil {
			return 0, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return 0, err
		}
		defer pprof.StopCPUProfile()
	}
	spec := fmt.Sprintf(`{"id": "bench-%d", "input": %q, "json_path": "$.items[*]", "agent_template": [{"handler": "noop"}]}`, run, filepath.Base(input))
	start := time.Now()
	reply, err := client.JobSubmit(ctx, []byte(spec))
	if err != nil {
		return 0, err
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Minute)
	defer wcancel()
	st, err := client.JobWait(wctx, reply.JobID, 50*time.Millisecond, nil)
	if err != nil {
		return 0, err
	}
	el := time.Since(start)
	cancel()
	for i := 0; i < agents+1; i++ {
		<-errs
	}
	if st.Succeeded != int64(n) {
		return 0, fmt.Errorf("job ended %s with %d of %d succeeded", st.State, st.Succeeded, n)
	}
	return float64(n) / el.Seconds(), nil
}
