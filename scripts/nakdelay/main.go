// Command nakdelay measures how late an embedded JetStream server
// redelivers a message after a delayed nak while other delayed naks keep
// coming, with the naks sent one by one as the failures happen, or together
// on 20 ms ticks of the wall clock as the agent sends them
// (pkg/agent/nakpace.go). The server resets the consumer's pending timer
// to 10 ms at every delayed nak, so a steady stream of them keeps due
// redeliveries waiting.
//
// It publishes -n messages to a WorkQueue stream, consumes them with two
// pull consumers of one durable, naks each message's first delivery with
// -delay at the chance -rate (a fixed hash of its sequence) and acks the
// rest, at most -window messages out at once (MaxAckPending); for every redelivery it records how long after its due time it
// came. Each -rounds round runs both ways, on a fresh stream, and prints
// the job's time and the lateness's percentiles.
//
//	go run ./scripts/nakdelay -n 30000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const tick = 20 * time.Millisecond

func main() {
	n := flag.Int("n", 30000, "messages")
	rate := flag.Float64("rate", 0.3, "share of messages whose first delivery is naked")
	delay := flag.Duration("delay", 10*time.Millisecond, "the naks' delay")
	rounds := flag.Int("rounds", 3, "rounds of both ways")
	window := flag.Int("window", 1000, "the consumer's MaxAckPending: as the coordinator's --job-queue, the most messages out at once, retries waiting included")
	flag.Parse()

	dir, err := os.MkdirTemp("", "nakdelay")
	check(err)
	defer os.RemoveAll(dir)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	check(err)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	check(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	check(err)

	for r := 1; r <= *rounds; r++ {
		for _, paced := range []bool{false, true} {
			took, late := run(js, fmt.Sprintf("r%d%v", r, paced), *n, *window, *rate, *delay, paced)
			slices.Sort(late)
			pct := func(p float64) time.Duration {
				if len(late) == 0 {
					return 0
				}
				return late[min(len(late)-1, int(p*float64(len(late))))].Round(time.Millisecond)
			}
			mode := "one by one"
			if paced {
				mode = "on ticks  "
			}
			fmt.Printf("round %d, naks %s: %6.2f s, %d redeliveries late by p50 %v, p90 %v, p99 %v, max %v\n",
				r, mode, took.Seconds(), len(late), pct(0.5), pct(0.9), pct(0.99), pct(1))
		}
	}
}

func run(js jetstream.JetStream, name string, n, window int, rate float64, delay time.Duration, paced bool) (time.Duration, []time.Duration) {
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W" + name, Subjects: []string{name + ".>"}, Retention: jetstream.WorkQueuePolicy})
	check(err)
	defer func() { _ = js.DeleteStream(ctx, "W"+name) }()
	for i := range n {
		_, err := js.PublishAsync(name+".x", []byte(strconv.Itoa(i)))
		check(err)
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: window})
	check(err)

	var mu sync.Mutex
	due := map[uint64]time.Time{}
	var late []time.Duration
	var done atomic.Int64
	finished := make(chan struct{})
	var q []pacedNak
	var qmu sync.Mutex
	stop := make(chan struct{})
	if paced {
		go func() {
			for {
				now := time.Now()
				select {
				case <-time.After(now.Truncate(tick).Add(tick).Sub(now)):
				case <-stop:
					return
				}
				qmu.Lock()
				batch := q
				q = nil
				qmu.Unlock()
				now = time.Now()
				for _, p := range batch {
					_ = p.m.NakWithDelay(max(p.due.Sub(now), time.Millisecond))
				}
			}
		}()
	}
	t0 := time.Now()
	handle := func(m jetstream.Msg) {
		md, err := m.Metadata()
		check(err)
		seq := md.Sequence.Stream
		if md.NumDelivered == 1 && float64(seq*2654435761%1000)/1000 < rate {
			at := time.Now().Add(delay)
			mu.Lock()
			due[seq] = at
			mu.Unlock()
			if paced {
				qmu.Lock()
				q = append(q, pacedNak{m, at})
				qmu.Unlock()
			} else {
				_ = m.NakWithDelay(delay)
			}
			return
		}
		if md.NumDelivered > 1 {
			mu.Lock()
			late = append(late, time.Since(due[seq]))
			mu.Unlock()
		}
		_ = m.Ack()
		if done.Add(1) == int64(n) {
			close(finished)
		}
	}
	var ccs []jetstream.ConsumeContext
	for range 2 {
		cc, err := cons.Consume(handle, jetstream.PullMaxMessages(256))
		check(err)
		ccs = append(ccs, cc)
	}
	<-finished
	took := time.Since(t0)
	for _, cc := range ccs {
		cc.Stop()
	}
	close(stop)
	return took, late
}

type pacedNak struct {
	m   jetstream.Msg
	due time.Time
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
