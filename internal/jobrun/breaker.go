package jobrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// fillBreaker copies the job's circuit-breaker state (the agents of its
// pool keep it in the breaker bucket, key <pool>.<job>) into st; a job
// whose groups run in other pools has a breaker in each, and st shows its
// own pool's. A job with a breaker and
// no key yet shows a closed breaker; a job without one shows none. On a
// read error st keeps what it had.
func (c *Coordinator) fillBreaker(ctx context.Context, st *messages.JobStatus) {
	if c.breakers == nil {
		return
	}
	e, err := c.breakers.Get(ctx, cmp.Or(st.Pool, messages.DefaultPool)+"."+st.ID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if c.jobHasBreaker(st.ID) {
			st.Breaker = &messages.BreakerStatus{State: retry.CircuitClosed}
		}
		return
	case err != nil:
		return
	}
	var bs retry.BreakerState
	if err := json.Unmarshal(e.Value(), &bs); err != nil {
		return
	}
	st.Breaker = breakerStatus(bs)
}

// breakerStatus is the status view of a breaker state.
func breakerStatus(bs retry.BreakerState) *messages.BreakerStatus {
	out := &messages.BreakerStatus{State: bs.State, Failures: bs.Failures, Probes: bs.Probes, Successes: bs.Successes}
	if out.State == "" {
		out.State = retry.CircuitClosed
	}
	if !bs.OpenedAt.IsZero() {
		t := bs.OpenedAt
		out.OpenedAt = &t
	}
	return out
}

// jobHasBreaker reports whether a running job's spec configures a circuit
// breaker (finished jobs keep the breaker their last status recorded).
func (c *Coordinator) jobHasBreaker(id string) bool {
	r := c.runner(id)
	if r == nil {
		return false
	}
	r.mu.Lock()
	spec := r.rec.Spec
	r.mu.Unlock()
	return spec != nil && spec.ErrorPolicy != nil && spec.ErrorPolicy.CircuitBreaker != nil
}
