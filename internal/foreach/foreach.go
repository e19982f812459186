// Package foreach runs a foreach step's elements (Prodigy's foreach:,
// docs/job-spec.md): the elements a command's output gives, and the run of
// each, one after another or a bounded number at a time, stopping at the
// first failure unless told to go on. The agent (internal/itemrun) runs
// the steps of each element; this package decides which run and when. It
// is safe for concurrent use.
package foreach

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// Lines returns the elements of a command's output, as Prodigy reads
// them: its lines, each trimmed of surrounding white space, empty ones
// left out.
func Lines(out string) []string {
	var elems []string
	for line := range strings.Lines(out) {
		if s := strings.TrimSpace(line); s != "" {
			elems = append(elems, s)
		}
	}
	return elems
}

// Select keeps the first maxItems elements (maxItems 0: all), and refuses
// more than limit of them.
func Select(elems []string, maxItems, limit int) ([]string, error) {
	if maxItems > 0 && len(elems) > maxItems {
		elems = elems[:maxItems]
	}
	if len(elems) > limit {
		return nil, fmt.Errorf("%d elements, more than %d (max_items keeps the first N)", len(elems), limit)
	}
	return elems, nil
}

// Failure is an element whose run failed.
type Failure struct {
	Index int
	Err   error
}

// Run calls run for elements 0 to n-1, at most parallel at a time (0 or
// 1: one after another, in order). Unless continueOnError, the first
// failure stops handing out elements (those already running finish), as
// does the end of ctx. It returns the failures in element order and the
// number of elements that ran.
func Run(ctx context.Context, n, parallel int, continueOnError bool, run func(ctx context.Context, i int) error) (failures []Failure, ran int) {
	parallel = max(parallel, 1)
	var (
		mu      sync.Mutex
		next    int
		stopped bool
		errs    = make([]error, n)
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if stopped || next >= n || ctx.Err() != nil {
			return 0, false
		}
		i := next
		next++
		return i, true
	}
	worker := func() {
		for {
			i, ok := take()
			if !ok {
				return
			}
			if err := run(ctx, i); err != nil {
				mu.Lock()
				errs[i] = err
				if !continueOnError {
					stopped = true
				}
				mu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker()
		}()
	}
	wg.Wait()
	for i, err := range errs[:next] {
		if err != nil {
			failures = append(failures, Failure{Index: i, Err: err})
		}
	}
	return failures, next
}
