package budget

import "context"

// Test hooks, compiled only into this package's tests.

// Cached is what b remembers of job: its last seen record and whether it
// knows the job is exhausted.
func Cached(b *Budget, job string) (rec Record, exhausted, ok bool) {
	e, _, ok := b.store.Cached(job)
	return e.Value, ok && e.Exists && e.Value.Remaining() == 0, ok
}

// Watching reports whether b's bucket watch is established.
func Watching(b *Budget) bool { return b.store.Watching() }

// ReadRevision reads job's revision the way the compare-and-set loop does.
func ReadRevision(ctx context.Context, b *Budget, job string) (uint64, error) {
	e, err := b.store.Read(ctx, job)
	switch {
	case err != nil:
		return 0, err
	case !e.Exists:
		return 0, ErrNotFound
	}
	return e.Revision, nil
}

// Surplus is how many recorded units b holds for job without having handed
// them out (a caller that gave up while its unit was being written, or more
// units written than callers left).
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
