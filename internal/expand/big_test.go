package expand

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/expand/expandtest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// bigHeapLimit is the peak heap (in use) allowed while expanding a
// million-item input.
const bigHeapLimit = 200 << 20

// TestBigInputMemory streams a generated 1,000,000-item input (the format
// of scripts/genitems) through Count and then Open/Next, and reports the
// peak heap of each pass. It runs only with JETFLEET_BIG=1 and without
// -short:
//
//	JETFLEET_BIG=1 go test -run TestBigInputMemory -v ./internal/expand/
//
// JETFLEET_BIG_N changes the number of items.
func TestBigInputMemory(t *testing.T) {
	if testing.Short() || os.Getenv("JETFLEET_BIG") != "1" {
		t.Skip("set JETFLEET_BIG=1 (and no -short) to expand a 1,000,000-item input")
	}
	n := 1_000_000
	if s := os.Getenv("JETFLEET_BIG_N"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "items.json")
	require.NoError(t, writeItems(path, n))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("input: %d items, %.1f MB", n, float64(fi.Size())/1e6)

	spec := &messages.JobSpec{Input: "items.json", JSONPath: "$.items[*]", GroupBy: "${item.region}"}
	open := FileOpener(dir)
	ctx := context.Background()

	var total int64
	var groups map[string]int64
	countPeak := measurePeak(t, "Count", func() {
		total, groups, err = Count(ctx, spec, open)
		require.NoError(t, err)
	})
	require.Equal(t, int64(n), total)
	require.Len(t, groups, min(n, 3))

	read := 0
	nextPeak := measurePeak(t, "Open/Next", func() {
		src, err := Open(ctx, spec, open)
		require.NoError(t, err)
		for it, err := range src.All() {
			require.NoError(t, err)
			if it.Index != int64(read) {
				t.Fatalf("item %d has index %d", read, it.Index)
			}
			read++
		}
	})
	require.Equal(t, n, read)
	require.Less(t, countPeak, uint64(bigHeapLimit), "Count peak heap")
	require.Less(t, nextPeak, uint64(bigHeapLimit), "Open/Next peak heap")

	// Item selection without sort_by streams too: filter, offset and
	// max_items hold one item.
	sel := *spec
	sel.Filter, sel.Offset = "region != 'nowhere' && is_string(id)", 10
	var selected int64
	selPeak := measurePeak(t, "Count with filter and offset", func() {
		selected, _, err = Count(ctx, &sel, open)
		require.NoError(t, err)
	})
	require.Equal(t, int64(n-10), selected)
	require.Less(t, selPeak, uint64(bigHeapLimit), "Count with selection peak heap")
}

// measurePeak runs f while sampling the heap every millisecond and returns
// the peak heap in use (objects plus fragmentation, runtime.MemStats'
// HeapInuse) above what was in use before; it logs that, the total memory
// mapped from the OS (Sys) and the time taken.
func measurePeak(t *testing.T, name string, f func()) uint64 {
	t.Helper()
	runtime.GC()
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/total:bytes"},
	}
	read := func() (heap, sys uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64() + samples[1].Value.Uint64(), samples[2].Value.Uint64()
	}
	base, _ := read()
	var peakHeap, peakSys uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			h, s := read()
			peakHeap, peakSys = max(peakHeap, h), max(peakSys, s)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	start := time.Now()
	f()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	h, s := read()
	peakHeap, peakSys = max(peakHeap, h), max(peakSys, s)
	t.Logf("%s: peak heap in use %.1f MB (%.1f MB before), peak total from OS %.1f MB, %v",
		name, float64(peakHeap)/1e6, float64(base)/1e6, float64(peakSys)/1e6, elapsed.Round(time.Millisecond))
	return peakHeap
}

// writeItems writes n items as scripts/genitems does.
func writeItems(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := expandtest.WriteItems(f, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
