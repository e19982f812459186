package jobrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// synthResults is a results stream made up on the fly: message seq holds
// one result of item (seq-1) % items, of generation (seq-1) / items, with
// an output of outBytes; nothing is kept between calls.
func synthResults(items, gens, outBytes int) resultSource {
	return func(_ context.Context, from, to uint64, fn func(uint64, string, []byte)) error {
		last := uint64(items * gens)
		for seq := max(from, 1); seq <= min(to, last); seq++ {
			idx, gen := int64(seq-1)%int64(items), int((seq-1)/uint64(items))
			res := messages.Result{JobID: "j", ItemID: fmt.Sprintf("i%d", idx), Index: idx, Generation: gen,
				Outcome: messages.OutcomeSucceeded, Output: fmt.Sprintf("%d:%d:", idx, gen) + strings.Repeat("o", outBytes)}
			data, _ := json.Marshal(&res)
			fn(seq, "fleet.results.default.j", data)
		}
		return nil
	}
}

// mapResultsRunner is a runner of items whose outcomes are counted at
// generation gen.
func mapResultsRunner(t *testing.T, items, gen int) *jobRunner {
	r := testRunner(t, &messages.JobSpec{ID: "j", Pool: "default"}, int64(items), nil)
	r.c.names = messages.MustNames("fleet")
	r.pools = &itemPools{def: "default", names: []string{"default"}, known: true}
	for i := range r.outcome {
		r.outcome[i] = ocSucceeded
		if gen > 0 {
			r.gens[int64(i)] = gen
		}
	}
	return r
}

// The map results keep, per item, its latest generation's result, in
// input order, as one JSON array.
func TestWriteMapResults(t *testing.T) {
	t.Parallel()
	r := mapResultsRunner(t, 5, 1)
	r.outcome[3] = ocNotRun // not in the file
	var buf bytes.Buffer
	require.NoError(t, r.writeMapResults(context.Background(), &buf, synthResults(5, 2, 1), 64))
	var outs []messages.MapOutput
	require.NoError(t, json.Unmarshal(buf.Bytes(), &outs))
	require.Len(t, outs, 4)
	for i, want := range []int64{0, 1, 2, 4} {
		require.Equal(t, want, outs[i].Index)
		require.Equal(t, fmt.Sprintf("%d:1:o", want), outs[i].Output, "generation 1's result")
	}
	buf.Reset()
	require.NoError(t, mapResultsRunner(t, 3, 0).writeMapResults(context.Background(), &buf, synthResults(0, 1, 1), 64))
	require.Equal(t, "[]", buf.String())
}

// The map results are read up to the last result the stream's leader
// holds, even when the read's ordered consumer sits on a replica that lags
// the leader and says nothing is pending before then: the reduce would
// otherwise run on part of the job's results.
func TestWriteMapResultsReadsPastALaggingReplica(t *testing.T) {
	t.Parallel()
	const items, held = 200, 50
	srv := fleettest.RunServer(t)
	r := mapResultsRunner(t, items, 0)
	ctx := context.Background()
	_, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{Name: r.c.names.ResultsStream(), Subjects: []string{r.c.names.ResultsFilter()}})
	require.NoError(t, err)
	for i := range items {
		data, _ := json.Marshal(messages.Result{JobID: "j", ItemID: fmt.Sprint(i), Index: int64(i), Outcome: messages.OutcomeSucceeded})
		_, err := srv.JS().Publish(ctx, "fleet.results.default.j", data)
		require.NoError(t, err)
	}
	lag := fleettest.NewLaggingReplica(held)
	r.c.js = lag.JetStream(srv.JS(), r.c.names.ResultsStream())
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- r.writeMapResults(ctx, &buf, r.resultsSource(), 1<<20) }()
	select {
	case <-lag.Asked():
	case err := <-done:
		t.Fatalf("writing the map results ended (%v) without reading past the lagging replica", err)
	}
	lag.CatchUp()
	require.NoError(t, <-done)
	var outs []messages.MapOutput
	require.NoError(t, json.Unmarshal(buf.Bytes(), &outs))
	require.Len(t, outs, items, "every item's result, not only the %d the replica held", held)
}

// Issue #23, case 8: writing the map results holds one window of outputs,
// not all of them. Two generations of 800 items of 48 KB are read (77 MB)
// and the latest written (38 MB), in windows of 1 MB, with the heap never
// more than 32 MB above where it started (sampled every millisecond while
// it runs; about 5 MB alone, more while other tests of the package still
// wind down). Holding them all, as the reduce did, takes twice the 38 MB
// (the outputs, then their JSON).
func TestWriteMapResultsMemoryIsBounded(t *testing.T) {
	const items, gens, out = 800, 2, 48 << 10
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	r := mapResultsRunner(t, items, gens-1)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	var n countingWriter
	err := r.writeMapResults(context.Background(), &n, synthResults(items, gens, out), 1<<20)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Greater(t, int64(n), int64(items*out), "every output written")
	grew := int64(peak.Load()) - int64(base)
	t.Logf("%d MB of map results written; heap peak %.1f MB above the start", n>>20, float64(grew)/(1<<20))
	require.Less(t, grew, int64(32<<20), "the heap grew by %d bytes", grew)
}

type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
