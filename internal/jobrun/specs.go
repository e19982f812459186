package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// specBuckets writes the spec records of jobs (wire.SpecRecord) into each
// pool's specs bucket, which the pool's agents read instead of the job
// record: the record's status, errors and counts are for the coordinator,
// the job's team and operators only (docs/security.md). Safe for
// concurrent use.
type specBuckets struct {
	mu sync.Mutex
	kv map[string]jetstream.KeyValue // by pool
}

// errSpecsDenied: the coordinator's permissions do not name the pool's
// specs bucket (role keys of the previous release, kept until the roll's
// end: docs/deploy.md, "Upgrades"). The job record, which holds the spec
// too, is what the pool's agents read then.
var errSpecsDenied = errors.New("the coordinator's permissions do not name the specs bucket")

// bucket returns pool's specs bucket, made if it does not exist yet.
func (s *specBuckets) bucket(ctx context.Context, c *Coordinator, pool string) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv, ok := s.kv[pool]
	s.mu.Unlock()
	if ok {
		return kv, nil
	}
	if !c.pools.MayUse(ctx, "KV_"+c.names.SpecsBucket(pool)) {
		return nil, errSpecsDenied
	}
	kv, err := c.js.KeyValue(ctx, c.names.SpecsBucket(pool))
	if err != nil {
		kv, err = provision.EnsureSpecs(ctx, c.js, c.names, pool, c.cfg.Provision.config())
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.kv == nil {
		s.kv = map[string]jetstream.KeyValue{}
	}
	s.kv[pool] = kv
	s.mu.Unlock()
	return kv, nil
}

// writeSpecs writes rec's spec record for each pool its items go to. A
// record of an earlier version, accepted before specs were kept apart,
// gets its spec records when its runner starts, as every job does.
func (c *Coordinator) writeSpecs(ctx context.Context, rec *wire.JobRecord) error {
	if rec.Spec == nil {
		return nil
	}
	data, err := json.Marshal(wire.SpecOf(rec))
	if err != nil {
		return err
	}
	for _, pool := range wire.JobPools(rec) {
		kv, err := c.specs.bucket(ctx, c, pool)
		if errors.Is(err, errSpecsDenied) {
			continue // the pool's agents read the job record (its spec is there too)
		}
		if err != nil {
			return fmt.Errorf("specs bucket of pool %s: %w", pool, err)
		}
		if _, err := kv.Put(ctx, rec.Status.ID, data); err != nil {
			return fmt.Errorf("spec of job %s for pool %s: %w", rec.Status.ID, pool, err)
		}
	}
	return nil
}

// ensureSpecs is writeSpecs for a runner about to start: tried for up to
// specsPatience (the job's items must not reach agents before their
// spec), then logged. An agent that finds no spec for an item naks it and
// tries again later.
//
// Each try is bounded by specTryTimeout, far below a request's default
// 5 s: a write sent to a bucket whose stream is electing a leader (its
// leader's node just cut off) goes unanswered, and the next try, a moment
// after the election, is answered. With the default timeout a new
// leader's runner waited up to 5 s past the election to start, and status,
// which waits for the runner, with it (TestCutOffCoordinatorHandsOver).
func (c *Coordinator) ensureSpecs(ctx context.Context, r *jobRunner, rec *wire.JobRecord) {
	giveUp := time.Now().Add(specsPatience)
	for {
		tctx, cancel := context.WithTimeout(ctx, specTryTimeout)
		err := c.writeSpecs(tctx, rec)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Now().After(giveUp) {
			r.log.Warn().Err(err).Msg("cannot write the job's spec for its pools' agents; they cannot run its items until it is written")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(specTryEvery):
		}
	}
}

// How ensureSpecs tries: each try at most specTryTimeout, specTryEvery
// apart, for specsPatience (about as long as five tries of a request's
// default timeout took before).
const (
	specTryTimeout = time.Second
	specTryEvery   = 250 * time.Millisecond
	specsPatience  = 30 * time.Second
)

// removeSpecs deletes an expiring job's spec records.
func (c *Coordinator) removeSpecs(ctx context.Context, rec *wire.JobRecord) error {
	if rec.Spec == nil || rec.Status.State == messages.StateRejected {
		return nil // never had any
	}
	for _, pool := range wire.JobPools(rec) {
		if err := provision.RemoveSpec(ctx, c.js, c.names, pool, rec.Status.ID); err != nil {
			return fmt.Errorf("removing the spec of job %s for pool %s: %w", rec.Status.ID, pool, err)
		}
	}
	return nil
}
