// Command servercost measures what each thing jetfleet's work messages
// need costs the JetStream server, one at a time, on the plain pipeline
// (async publish N messages to a WorkQueue stream, then consume and ack
// them): a Nats-Msg-Id per message (the work stream's exactly-once
// publication), a header that is not one, a jetfleet-sized body, a
// consumer filtered on one pool's subjects, fetches of 256 instead of
// Consume, and all of them together. It alternates the variants for
// -rounds rounds on one server and prints, per variant, the median rate
// and the server's CPU seconds per 100,000 messages (user + system, read
// from /proc/<-server-pid>/stat), and the median's ratio to plain.
//
// scripts/bench-server-cost.sh builds a nats-server and runs it; see
// docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// variant is one way of running the pipeline.
type variant struct {
	name   string
	msgID  bool // a Nats-Msg-Id per message, in a 10-minute duplicate window
	header bool // a header of the same size that is not Nats-Msg-Id
	size   int  // body bytes
	filter bool // the consumer filters on <prefix>.work.default.>
	fetch  int  // > 0: Fetch(fetch) loops, as an agent pulls, instead of Consume
	fast   bool // published as one fast batch (flow-controlled acks) instead of PublishAsync
}

var variants = []variant{
	{name: "plain", size: 70},
	{name: "header", header: true, size: 70},
	{name: "msg-id", msgID: true, size: 70},
	{name: "body 240 B", size: 240},
	{name: "filtered", filter: true, size: 70},
	{name: "fetch 256", fetch: 256, size: 70},
	{name: "all (jetfleet-shaped)", msgID: true, size: 240, filter: true, fetch: 256},
	{name: "fast batch", fast: true, size: 70},
	{name: "fast batch, msg-id", fast: true, msgID: true, size: 70},
	{name: "all, fast batch", fast: true, msgID: true, size: 240, filter: true, fetch: 256},
}

func main() {
	url := flag.String("server", "nats://127.0.0.1:4222", "the server's URL")
	pid := flag.Int("server-pid", 0, "the server's process id, for its CPU time")
	n := flag.Int("n", 100000, "messages per run")
	rounds := flag.Int("rounds", 3, "rounds of every variant, alternating")
	flag.Parse()
	if *pid <= 0 {
		fmt.Fprintln(os.Stderr, "servercost: -server-pid is required")
		os.Exit(2)
	}
	rates := make([][]float64, len(variants))
	cpus := make([][]float64, len(variants))
	for r := range *rounds {
		for i, v := range variants {
			c0, err := cpuSeconds(*pid)
			if err != nil {
				fail(err)
			}
			rate, err := run(*url, *n, fmt.Sprintf("C%d_%d", r, i), v)
			if err != nil {
				fail(fmt.Errorf("%s: %w", v.name, err))
			}
			c1, err := cpuSeconds(*pid)
			if err != nil {
				fail(err)
			}
			per := (c1 - c0) * 100000 / float64(*n)
			rates[i], cpus[i] = append(rates[i], rate), append(cpus[i], per)
			fmt.Printf("round %d %-22s %8.0f msgs/s  server %.2f CPU-s per 100k\n", r+1, v.name, rate, per)
		}
	}
	base := median(cpus[0])
	fmt.Printf("\n%-22s %12s %22s %10s\n", "variant", "median rate", "server CPU-s per 100k", "vs plain")
	for i, v := range variants {
		c := median(cpus[i])
		fmt.Printf("%-22s %12.0f %22.2f %9.2fx\n", v.name, median(rates[i]), c, c/base)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "servercost:", err)
	os.Exit(1)
}

// run publishes n messages of v to a new stream named name, then consumes
// and acks them, and returns messages per second over both.
func run(url string, n int, name string, v variant) (float64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	prefix := strings.ToLower(name)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".work.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
		AllowBatchPublish: v.fast,
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(ctx, name) }()
	cc := jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}
	if v.filter {
		cc.FilterSubject = prefix + ".work.default.>"
	}
	cons, err := st.CreateConsumer(ctx, cc)
	if err != nil {
		return 0, err
	}
	subject := prefix + ".work.default.job-0123456789abcdef01234567"
	body := []byte(`{"x":"` + strings.Repeat("a", max(v.size-8, 0)) + `"}`)
	msg := func(i int) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = body
		// As long as a work message's id: <job>/<item>/<generation>.
		id := "job-0123456789abcdef01234567/aXRlbS0" + strconv.Itoa(1000000+i) + "/0"
		switch {
		case v.msgID:
			m.Header[jetstream.MsgIDHeader] = []string{id}
		case v.header:
			m.Header["X-Item"] = []string{id}
		}
		return m
	}
	start := time.Now()
	if v.fast {
		if err := publishFast(nc, n, msg); err != nil {
			return 0, err
		}
	} else {
		for i := range n {
			if _, err := js.PublishMsgAsync(msg(i), jetstream.WithStallWait(30*time.Second)); err != nil {
				return 0, err
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			return 0, errors.New("publishing did not complete")
		}
	}
	var got atomic.Int64
	if v.fetch > 0 {
		for got.Load() < int64(n) {
			batch, err := cons.Fetch(v.fetch, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return 0, err
			}
			for m := range batch.Messages() {
				_ = m.Ack()
				got.Add(1)
			}
		}
	} else {
		done := make(chan struct{})
		cc, err := cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			if got.Add(1) == int64(n) {
				close(done)
			}
		})
		if err != nil {
			return 0, err
		}
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
		}
		cc.Stop()
		if got.Load() < int64(n) {
			return 0, fmt.Errorf("consumed %d of %d", got.Load(), n)
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	// The acks are sent without waiting; let the server take the last
	// ones before the CPU is read and the stream deleted.
	if err := nc.Flush(); err != nil {
		return 0, err
	}
	return rate, nil
}

// publishFast publishes msg(0) … msg(n-1) as one fast batch: the batch's
// position is in each message's reply subject, the server acknowledges
// every few hundred messages (a flow ack) and the commit with a PubAck.
// At most window messages are sent beyond the last flow ack.
func publishFast(nc *nats.Conn, n int, msg func(int) *nats.Msg) error {
	const flow, window = 500, 2000
	inbox := nc.NewInbox()
	batch := inbox[strings.LastIndexByte(inbox, '.')+1:]
	replies := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(inbox+".>", replies)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var acked uint64
	done := false
	take := func(r *nats.Msg) error {
		var a struct {
			Type  string          `json:"type"`
			Seq   uint64          `json:"seq"`
			Batch string          `json:"batch"`
			Count uint64          `json:"count"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(r.Data, &a); err != nil {
			return err
		}
		switch {
		case len(a.Error) > 0:
			return fmt.Errorf("batch: %s", a.Error)
		case a.Type == "ack":
			acked = max(acked, a.Seq)
		case a.Type != "":
			return fmt.Errorf("batch: %s", r.Data)
		case a.Batch != "":
			if a.Count != uint64(n) {
				return fmt.Errorf("batch committed %d of %d", a.Count, n)
			}
			done = true
		}
		return nil
	}
	for i := range n {
		seq := uint64(i + 1)
		op := 1
		switch {
		case i == n-1:
			op = 2
		case i == 0:
			op = 0
		}
		m := msg(i)
		m.Reply = inbox + "." + batch + "." + strconv.Itoa(flow) + ".fail." + strconv.FormatUint(seq, 10) + "." + strconv.Itoa(op) + ".$FI"
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
		for seq > acked+window {
			select {
			case r := <-replies:
				if err := take(r); err != nil {
					return err
				}
			case <-time.After(30 * time.Second):
				return fmt.Errorf("no flow ack after %d", acked)
			}
		}
	}
	for !done {
		select {
		case r := <-replies:
			if err := take(r); err != nil {
				return err
			}
		case <-time.After(30 * time.Second):
			return errors.New("no PubAck for the commit")
		}
	}
	return nil
}

// cpuSeconds is the user and system CPU time of process pid so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const clkTck = 100 // USER_HZ on Linux
	return (utime + stime) / clkTck, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
