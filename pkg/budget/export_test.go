package budget

import "context"

// Test hooks, compiled only into this package's tests.

// Cached is what b remembers of job: its last seen record and whether it
// knows the job is exhausted.
func Cached(b *Budget, job string) (rec Record, exhausted, ok bool) {
	b.mu.Lock()
	st := b.jobs[job]
	b.mu.Unlock()
	if st == nil {
		return Record{}, false, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rec, st.exhausted, st.known
}

// Watching reports whether b's bucket watch is established.
func Watching(b *Budget) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watcher != nil
}

// ReadRevision reads job's revision the way the compare-and-set loop does.
func ReadRevision(ctx context.Context, b *Budget, job string) (uint64, error) {
	_, rev, err := b.reader.get(ctx, job)
	return rev, err
}

// Surplus is how many recorded units b holds for job without having handed
// them out (only after a write whose acknowledgement was lost, or a caller
// that gave up while its unit was being written).
func Surplus(b *Budget, job string) int {
	b.mu.Lock()
	st := b.jobs[job]
	b.mu.Unlock()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.surplus
}
