// Package kvleader reads KV keys from the stream leader.
//
// KeyValue.Get uses direct gets, which any replica may answer; on R3 a
// lagging follower can serve a value older than a write that was already
// acknowledged (docs/jetstream.md §10), which makes a compare-and-set loop fail
// again and again. $JS.API.STREAM.MSG.GET is answered by the leader only,
// and the leader has applied every acknowledged write, so a read after a
// lost compare-and-set sees the write that won.
package kvleader

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

// errCodeMessageNotFound is JetStream's "no message found".
const errCodeMessageNotFound = 10037

// Reader reads one bucket's keys from its stream leader. It is safe for
// concurrent use.
type Reader struct {
	nc      *nats.Conn
	api     string // $JS.API.STREAM.MSG.GET.KV_<bucket>
	subjPre string // $KV.<bucket>.
}

// New returns a Reader of bucket over js's connection, honouring its API
// prefix or domain.
func New(js jetstream.JetStream, bucket string) Reader {
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
	return Reader{nc: js.Conn(), api: prefix + "STREAM.MSG.GET.KV_" + bucket, subjPre: "$KV." + bucket + "."}
}

// Get returns the key's last value and its revision. A key that never
// existed has data nil and rev 0; a deleted or purged key has data nil and
// the revision of its marker. A present key's data is never nil.
func (r Reader) Get(ctx context.Context, key string) (data []byte, rev uint64, err error) {
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{r.subjPre + key})
	msg, err := r.nc.RequestWithContext(ctx, r.api, req)
	if err != nil {
		return nil, 0, err
	}
	var resp struct {
		Message *struct {
			Sequence uint64 `json:"seq"`
			Header   []byte `json:"hdrs,omitempty"`
			Data     []byte `json:"data,omitempty"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("malformed STREAM.MSG.GET response: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == errCodeMessageNotFound:
		return nil, 0, nil
	case resp.Error != nil:
		return nil, 0, resp.Error
	case resp.Message == nil:
		return nil, 0, errors.New("empty STREAM.MSG.GET response")
	case bytes.Contains(resp.Message.Header, []byte("KV-Operation")):
		return nil, resp.Message.Sequence, nil // a delete or purge marker
	}
	if resp.Message.Data == nil {
		resp.Message.Data = []byte{}
	}
	return resp.Message.Data, resp.Message.Sequence, nil
}
