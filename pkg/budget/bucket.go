package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
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

// leaderReader reads through $JS.API.STREAM.MSG.GET.<stream>, which only
// the stream's leader answers, and the leader has applied every write that
// was acknowledged: a read after a failed compare-and-set sees the write
// that beat it (unless that write is itself still in flight).
type leaderReader struct {
	nc      *nats.Conn
	api     string // $JS.API.STREAM.MSG.GET.KV_<bucket>
	subjPre string // $KV.<bucket>.
}

func newLeaderReader(js jetstream.JetStream, bucket string) leaderReader {
	o := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		prefix = o.APIPrefix
		if !strings.HasSuffix(prefix, ".") {
			prefix += "."
		}
	}
	return leaderReader{
		nc:      js.Conn(),
		api:     prefix + "STREAM.MSG.GET.KV_" + bucket,
		subjPre: "$KV." + bucket + ".",
	}
}

type msgGetResponse struct {
	Message *struct {
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message"`
	Error *jetstream.APIError `json:"error"`
}

const errCodeMessageNotFound = 10037

func (r leaderReader) get(ctx context.Context, job string) (Record, uint64, error) {
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{r.subjPre + job})
	msg, err := r.nc.RequestWithContext(ctx, r.api, req)
	if err != nil {
		return Record{}, 0, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return Record{}, 0, fmt.Errorf("malformed STREAM.MSG.GET response: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == errCodeMessageNotFound {
			return Record{}, 0, fmt.Errorf("%w: %w", ErrNotFound, resp.Error)
		}
		return Record{}, 0, resp.Error
	}
	if resp.Message == nil {
		return Record{}, 0, errors.New("empty STREAM.MSG.GET response")
	}
	// A KV delete or purge is a marker with a KV-Operation header.
	if bytes.Contains(resp.Message.Header, []byte("KV-Operation")) {
		return Record{}, 0, fmt.Errorf("%w: key deleted", ErrNotFound)
	}
	rec, err := decodeRecord(resp.Message.Data)
	return rec, resp.Message.Sequence, err
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
