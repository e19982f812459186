package natsconn

import (
	"sync"
	"time"
)

// FullStore remembers that JetStream refused a write for want of room
// (StoreFull), through the unanswered writes that follow it: a stream
// whose leader refuses a write for want of room steps down, and no node
// without room stands for election, so later writes to it go unanswered
// (ClusterLoss) as through a server cut off the cluster. A write that
// succeeds, or fails otherwise, forgets the refusal. The zero value is
// ready; safe for concurrent use.
type FullStore struct {
	mu  sync.Mutex
	err error     // the refusal, nil when none is remembered
	at  time.Time // when it was observed
}

// Observe records the outcome of one write.
func (f *FullStore) Observe(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case StoreFull(err):
		f.err, f.at = err, time.Now()
	case f.err != nil && ClusterLoss(err):
		// Still full, most likely: the stream has had no leader since.
	default:
		f.err = nil
	}
}

// Err returns the refusal remembered, or nil.
func (f *FullStore) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Forget forgets the refusal: a write was stored since, by another
// process.
func (f *FullStore) Forget() {
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
}

// ForgetBefore forgets a refusal observed before t: a write was stored at
// t, by another process (a lease renewal another coordinator wrote).
func (f *FullStore) ForgetBefore(t time.Time) {
	f.mu.Lock()
	if f.err != nil && f.at.Before(t) {
		f.err = nil
	}
	f.mu.Unlock()
}
