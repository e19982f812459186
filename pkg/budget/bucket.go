package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvleader"
)

// BucketConfig is the configuration of the budget bucket (normally
// messages.Names.BudgetBucket(), "fleet_budget"): one key per job, history
// 1, file storage, replicas as given (1 or 3). Create it with
// js.CreateOrUpdateKeyValue. The bucket keeps KV's AllowDirect=true; the
// reads behind compare-and-set bypass direct get when the Budget is built
// WithJetStream.
func BucketConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "jetfleet job retry budgets",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// reader reads a job's record at its latest revision.
type reader interface {
	get(ctx context.Context, job string) (Record, uint64, error)
}

// kvReader reads through KeyValue.Get: a direct get when the bucket allows
// it, which a lagging replica may answer.
type kvReader struct{ kv jetstream.KeyValue }

func (r kvReader) get(ctx context.Context, job string) (Record, uint64, error) {
	e, err := r.kv.Get(ctx, job)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Record{}, 0, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return Record{}, 0, err
	}
	rec, err := decodeRecord(e.Value())
	return rec, e.Revision(), err
}

// leaderReader reads records from the bucket's stream leader, so a read
// after a failed compare-and-set sees the write that beat it (unless that
// write is itself still in flight).
type leaderReader struct{ r kvleader.Reader }

func newLeaderReader(js jetstream.JetStream, bucket string) leaderReader {
	return leaderReader{kvleader.New(js, bucket)}
}

func (l leaderReader) get(ctx context.Context, job string) (Record, uint64, error) {
	data, rev, err := l.r.Get(ctx, job)
	switch {
	case err != nil:
		return Record{}, 0, err
	case data == nil && rev == 0:
		return Record{}, 0, fmt.Errorf("%w: no record for job %s", ErrNotFound, job)
	case data == nil:
		return Record{}, 0, fmt.Errorf("%w: key deleted", ErrNotFound)
	}
	rec, err := decodeRecord(data)
	return rec, rev, err
}

func decodeRecord(data []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if err := rec.validate(); err != nil {
		return Record{}, err
	}
	return rec, nil
}
