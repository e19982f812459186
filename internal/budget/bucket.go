package budget

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
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
