package dlq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// BenchmarkReplay measures an unpaced replay of b.N entries (marker,
// republish and delete per entry, DefaultReplayConcurrency at once) and,
// in the same run on the same server, raw JetStream doing the least a
// replay must: publish one message and delete another, with the same
// concurrency. It reports both rates and their ratio.
//
//	go test -run '^$' -bench Replay -benchtime 5000x ./internal/dlq/
func BenchmarkReplay(b *testing.B) {
	f := newFleet(b, provision.Config{})
	ctx := context.Background()
	n := b.N
	seedEntries(b, f.js, "bench", n)
	in := dlq.NewInspector(f.js, names)
	rep := dlq.NewReplayer(f.js, names, in)

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	prog, err := rep.Replay(ctx, dlq.ReplayOptions{Filter: messages.DLQFilter{JobID: "bench"}})
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, err)
	require.EqualValues(b, n, prog.Replayed)

	raw := rawPublishDelete(b, f.js, n, dlq.DefaultReplayConcurrency)
	rate, rawRate := float64(n)/elapsed.Seconds(), float64(n)/raw.Seconds()
	b.ReportMetric(rate, "items/s")
	b.ReportMetric(rawRate, "raw_items/s")
	b.ReportMetric(rate/rawRate, "ratio")
}

// seedEntries stores n entries of job, published asynchronously.
func seedEntries(b *testing.B, js jetstream.JetStream, job string, n int) {
	b.Helper()
	var futs []jetstream.PubAckFuture
	for i := range n {
		e := entry(job, i, "network", "connection refused")
		data, err := json.Marshal(e)
		require.NoError(b, err)
		m := nats.NewMsg(names.DLQSubject("default", job))
		m.Data = data
		m.Header.Set(messages.HeaderReason, e.Reason)
		fut, err := js.PublishMsgAsync(m, jetstream.WithMsgID(dlq.EntryMsgID(job, e.ItemID, 0)))
		require.NoError(b, err)
		futs = append(futs, fut)
	}
	for _, fut := range futs {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			b.Fatal(err)
		}
	}
}

// rawPublishDelete times n × (publish one ~entry-sized message, delete
// one stored message) on plain streams, with conc workers.
func rawPublishDelete(b *testing.B, js jetstream.JetStream, n, conc int) time.Duration {
	b.Helper()
	ctx := context.Background()
	src, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW_SRC", Subjects: []string{"raw.src"}})
	require.NoError(b, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW_DST", Subjects: []string{"raw.dst"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(b, err)
	body, _ := json.Marshal(entry("raw", 1, "network", "connection refused"))
	var futs []jetstream.PubAckFuture
	for range n {
		fut, err := js.PublishAsync("raw.src", body)
		require.NoError(b, err)
		futs = append(futs, fut)
	}
	seqs := make(chan uint64, n)
	for _, fut := range futs {
		select {
		case ack := <-fut.Ok():
			seqs <- ack.Sequence
		case err := <-fut.Err():
			b.Fatal(err)
		}
	}
	close(seqs)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range seqs {
				m := nats.NewMsg("raw.dst")
				m.Data = body
				if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("%d/%d", w, seq))); err != nil {
					errs <- err
					return
				}
				if err := src.DeleteMsg(ctx, seq); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Since(start)
}
