package expand

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"strconv"
	"testing"
)

func TestIDSet(t *testing.T) {
	s := newIDSet()
	const n = 100_000 // several doublings
	for i := 0; i < n; i++ {
		if !s.add(strconv.Itoa(i)) {
			t.Fatalf("id %d reported as seen", i)
		}
	}
	for i := 0; i < n; i += 997 {
		if s.add(strconv.Itoa(i)) {
			t.Fatalf("id %d reported as new the second time", i)
		}
	}
	if s.n != n {
		t.Fatalf("n = %d", s.n)
	}
	if s.n*4 > len(s.slots)*3 {
		t.Fatalf("table over 3/4 full: %d in %d", s.n, len(s.slots))
	}
	// A hash of 0 (the empty mark) is stored as 1 and still found.
	slots := make([]uint64, 8)
	if !insert(slots, 1) || insert(slots, 1) {
		t.Fatal("insert of 1")
	}
}

// mapIDSet is the Go map the table replaced, for the comparison below.
type mapIDSet struct {
	seed maphash.Seed
	m    map[uint64]struct{}
}

func (s *mapIDSet) add(id string) bool {
	h := maphash.String(s.seed, id)
	if _, ok := s.m[h]; ok {
		return false
	}
	s.m[h] = struct{}{}
	return true
}

// BenchmarkIDSetMemory reports the heap the duplicate-id set holds per
// item after n ids, and the peak during the inserts, for the table and for
// a Go map (docs/benchmarks.md):
//
//	go test -run '^$' -bench IDSetMemory -benchtime 1x ./internal/expand/
func BenchmarkIDSetMemory(b *testing.B) {
	ids := make([]string, 0)
	for _, n := range []int{1_000_000, 5_000_000} {
		for len(ids) < n {
			ids = append(ids, "item-"+strconv.Itoa(len(ids)))
		}
		for _, kind := range []string{"table", "map"} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				for range b.N {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					var keep any
					switch kind {
					case "table":
						s := newIDSet()
						for _, id := range ids[:n] {
							s.add(id)
						}
						keep = s
					case "map":
						s := &mapIDSet{seed: maphash.MakeSeed(), m: map[uint64]struct{}{}}
						for _, id := range ids[:n] {
							s.add(id)
						}
						keep = s
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/item")
					b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "alloc-B/item")
					runtime.KeepAlive(keep)
				}
			})
		}
	}
}
