package provision

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// SpecsStore is the configuration of pool's specs bucket
// (messages.Names.SpecsBucket): the specs of the jobs whose items run in
// the pool, written by the coordinator only and read by the pool's agents
// only. It refuses rollups; the coordinator removes a job's key with the
// stream purge API (RemoveSpec), which leaves no marker behind.
func SpecsStore(n messages.Names, pool string, c Config) jetstream.KeyValueConfig {
	c = c.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket: n.SpecsBucket(pool), History: 1, Storage: c.storage(), Replicas: c.Replicas,
		Description: "jetfleet specs of pool " + pool + "'s jobs, for its agents (coordinator-written)",
	}
}

// EnsureSpecs creates or updates pool's specs bucket and returns it.
func EnsureSpecs(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config) (jetstream.KeyValue, error) {
	if err := ensureStream(ctx, js, BucketStream(n, SpecsStore(n, pool, c))); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, n.SpecsBucket(pool))
}

// RemoveSpec deletes job's key from pool's specs bucket, leaving nothing
// (a purge of the key's subject through the stream API, not a rollup). A
// bucket that does not exist holds nothing to remove.
func RemoveSpec(ctx context.Context, js jetstream.JetStream, n messages.Names, pool, job string) error {
	s, err := js.Stream(ctx, "KV_"+n.SpecsBucket(pool))
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	}
	return s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+n.SpecsBucket(pool)+"."+job))
}
