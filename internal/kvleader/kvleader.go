// Package kvleader reads KV keys, and whether a stream holds a subject,
// from the stream leader; and says whether a read of a subject with an
// ordered consumer must go on (ReadOn).
//
// KeyValue.Get uses direct gets, which any replica may answer; on R3 a
// lagging follower can serve a value older than a write that was already
// acknowledged (docs/jetstream.md §10), which makes a compare-and-set loop fail
// again and again. $JS.API.STREAM.MSG.GET is answered by the leader only,
// and the leader has applied every acknowledged write, so a read after a
// lost compare-and-set sees the write that won.
//
// One other server answers those requests too: a replica that believes its
// group has no leader. A node whose store is full drops every entry the
// group's leader sends, heartbeats included; one that led the group and
// stepped down (at its first write refused for want of room) never hears
// of the leader elected after it, and believes the group leaderless for as
// long as it stays full. Such a node answers STREAM.MSG.GET at once with
// "JetStream system temporarily unavailable" (10008), and STREAM.INFO with
// its own stale copy and no leader; when the requester is connected to it,
// its answer comes first. The reads here wait a moment for the leader's
// answer after such a one (leaderGrace): see docs/deploy.md, "A full
// store".
package kvleader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errCodeMessageNotFound is JetStream's "no message found".
const errCodeMessageNotFound = 10037

// errCodeClusterNotAvail is JetStream's "JetStream system temporarily
// unavailable": also what a replica that believes its group leaderless
// answers a request only the leader should.
const errCodeClusterNotAvail = 10008

// leaderGrace is how long a read waits for the leader's answer after a
// replica's answer without a leader came first. The leader answers within
// milliseconds when there is one; when there is none (an election under
// way) the read returns the replica's answer after this.
const leaderGrace = time.Second

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
	return Reader{nc: js.Conn(), api: msgGetAPI(js, "KV_"+bucket), subjPre: "$KV." + bucket + "."}
}

// msgGetAPI is the STREAM.MSG.GET subject of stream over js's connection,
// honouring its API prefix or domain.
func msgGetAPI(js jetstream.JetStream, stream string) string {
	return apiPrefix(js) + "STREAM.MSG.GET." + stream
}

// apiPrefix is the prefix of js's JetStream API subjects, honouring its API
// prefix or domain.
func apiPrefix(js jetstream.JetStream) string {
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
	return prefix
}

// Get returns the key's last value and its revision. A key that never
// existed has data nil and rev 0; a deleted or purged key has data nil and
// the revision of its marker. A present key's data is never nil.
func (r Reader) Get(ctx context.Context, key string) (data []byte, rev uint64, err error) {
	data, rev, _, err = r.GetStamped(ctx, key)
	return data, rev, err
}

// GetStamped is Get, with the time the server stored the value (or marker)
// by its own clock: zero when the key never existed.
func (r Reader) GetStamped(ctx context.Context, key string) (data []byte, rev uint64, stored time.Time, err error) {
	resp, err := msgGet(ctx, r.nc, r.api, msgGetRequest{LastBySubj: r.subjPre + key})
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == errCodeMessageNotFound:
		return nil, 0, time.Time{}, nil
	case resp.Error != nil:
		return nil, 0, time.Time{}, resp.Error
	case resp.Message == nil:
		return nil, 0, time.Time{}, errors.New("empty STREAM.MSG.GET response")
	case bytes.Contains(resp.Message.Header, []byte("KV-Operation")):
		return nil, resp.Message.Sequence, resp.Message.Time, nil // a delete or purge marker
	}
	if resp.Message.Data == nil {
		resp.Message.Data = []byte{}
	}
	return resp.Message.Data, resp.Message.Sequence, resp.Message.Time, nil
}

// AnyStored reports whether stream holds a message on subject (a filter),
// asking the stream's leader: a lagging replica's wrong "none" would make a
// caller skip data that is there.
func AnyStored(ctx context.Context, js jetstream.JetStream, stream, subject string) (bool, error) {
	_, ok, err := nextStored(ctx, js, stream, subject, 1)
	return ok, err
}

// StoredAfter reports whether stream holds a message on subject (a filter)
// after seq and not after bound, asking the stream's leader.
func StoredAfter(ctx context.Context, js jetstream.JetStream, stream, subject string, seq, bound uint64) (bool, error) {
	if seq >= bound {
		return false, nil
	}
	next, ok, err := nextStored(ctx, js, stream, subject, seq+1)
	return ok && next <= bound, err
}

// LastStored is the stream sequence of stream's last message on subject,
// as the stream's leader holds it: 0 when it holds none. jetstream's
// GetLastMsgForSubject takes the first answer, which a full node's replica
// that believes the group leaderless gives at once, with an error.
func LastStored(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	if _, has := ctx.Deadline(); !has && js.Options().DefaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	resp, err := msgGet(ctx, js.Conn(), msgGetAPI(js, stream), msgGetRequest{LastBySubj: subject})
	switch {
	case err != nil:
		return 0, err
	case resp.Error != nil && resp.Error.ErrorCode == errCodeMessageNotFound:
		return 0, nil
	case resp.Error != nil:
		return 0, resp.Error
	case resp.Message == nil:
		return 0, errors.New("empty STREAM.MSG.GET response")
	}
	return resp.Message.Sequence, nil
}

// nextStored is the sequence of the first message on subject (a filter) at
// or after from, as the stream's leader holds it (ok=false: none). A ctx
// without a deadline gets js's default timeout, as nats.go's own API calls
// do.
func nextStored(ctx context.Context, js jetstream.JetStream, stream, subject string, from uint64) (seq uint64, ok bool, err error) {
	if _, has := ctx.Deadline(); !has && js.Options().DefaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	resp, err := msgGet(ctx, js.Conn(), msgGetAPI(js, stream), msgGetRequest{Seq: from, NextBySubj: subject})
	switch {
	case err != nil:
		return 0, false, err
	case resp.Error != nil && resp.Error.ErrorCode == errCodeMessageNotFound:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, resp.Error
	case resp.Message == nil:
		return 0, false, errors.New("empty STREAM.MSG.GET response")
	}
	return resp.Message.Sequence, true, nil
}

// ReadOn reports whether a read of subject (a filter) of stream with an
// ordered consumer, which has just been handed the message md describes,
// must go on to reach bound: a sequence the stream's leader held when the
// read began (its last message on subject, or the stream's last).
//
// The consumer's NumPending does not say so. An ordered consumer has one
// replica, placed on any server of the stream's (nats-server's
// createGroupForConsumer), and counts pending from what that replica
// holds: one just back from a cut-off holds less for a while. So when it
// says nothing is pending short of bound, the leader says whether a message
// remains up to bound (purged or deleted meanwhile, or never there): the
// read goes on, and the consumer delivers it once its replica has it. The
// caller bounds how long it waits for that.
func ReadOn(ctx context.Context, js jetstream.JetStream, stream, subject string, md *jetstream.MsgMetadata, bound uint64) (bool, error) {
	seq := md.Sequence.Stream
	switch {
	case seq >= bound:
		return false, nil
	case md.NumPending > 0:
		return true, nil
	}
	return StoredAfter(ctx, js, stream, subject, seq, bound)
}

// msgGetRequest is a STREAM.MSG.GET request: the last message on a subject,
// or the first at or after Seq on a filter.
type msgGetRequest struct {
	Seq        uint64 `json:"seq,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
	NextBySubj string `json:"next_by_subj,omitempty"`
}

// msgGetResponse is STREAM.MSG.GET's answer: a message or an API error.
type msgGetResponse struct {
	Message *struct {
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message"`
	Error *jetstream.APIError `json:"error"`
}

func msgGet(ctx context.Context, nc *nats.Conn, api string, req msgGetRequest) (msgGetResponse, error) {
	var resp msgGetResponse
	body, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	msg, err := nc.RequestWithContext(ctx, api, body)
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return resp, fmt.Errorf("malformed STREAM.MSG.GET response: %w", err)
	}
	if resp.Error == nil || resp.Error.ErrorCode != errCodeClusterNotAvail {
		return resp, nil
	}
	// Unavailable: the group has no leader, or a replica that believes so
	// answered before the leader did (a node whose store is full). Ask
	// again, and take the leader's answer if one comes.
	data := leaderAnswer(ctx, nc, api, body, func(data []byte) bool {
		var r msgGetResponse
		return json.Unmarshal(data, &r) == nil && (r.Error == nil || r.Error.ErrorCode != errCodeClusterNotAvail)
	}, msg.Data)
	resp = msgGetResponse{}
	if err := json.Unmarshal(data, &resp); err != nil {
		return resp, fmt.Errorf("malformed STREAM.MSG.GET response: %w", err)
	}
	return resp, nil
}

// StreamInfo is stream's info as its leader answers it: its last sequence
// is that of the last write the stream acknowledged, whatever replica the
// caller's server holds. jetstream's Stream takes the first answer, which
// may come from a replica that believes the group has no leader and
// answers from its own copy (one on a node whose store is full holds what
// it had when it filled). After such an answer StreamInfo waits up to
// leaderGrace for the leader's, and returns the replica's only if none
// comes: the group may indeed have no leader.
func StreamInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	if _, has := ctx.Deadline(); !has && js.Options().DefaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	if Led(info) {
		return info, nil
	}
	data := leaderAnswer(ctx, js.Conn(), apiPrefix(js)+"STREAM.INFO."+stream, nil, func(data []byte) bool {
		info, err := decodeStreamInfo(data)
		return err == nil && Led(info)
	}, nil)
	if data == nil {
		return info, nil // no other answer: the first one
	}
	return decodeStreamInfo(data)
}

// Led reports whether a stream's info came from a server that knows the
// stream's leader: one not clustered, or a clustered one that names a
// leader. A replica that believes the group has no leader answers with
// none, from its own copy.
func Led(info *jetstream.StreamInfo) bool {
	return info != nil && (info.Cluster == nil || info.Cluster.Leader != "")
}

// decodeStreamInfo decodes a STREAM.INFO answer.
func decodeStreamInfo(data []byte) (*jetstream.StreamInfo, error) {
	var r struct {
		jetstream.StreamInfo
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("malformed STREAM.INFO response: %w", err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return &r.StreamInfo, nil
}

// leaderAnswer sends body to api again, after the answer refused (one
// that good refuses: a replica's that believes the group has no leader),
// and returns the first answer that good takes (the leader's). It hears
// every server that answers, for at most leaderGrace; then, or when no
// server takes the request, it returns the last answer refused. So a read
// whose first answer was refused costs at most leaderGrace more than it
// did when it returned that answer.
func leaderAnswer(ctx context.Context, nc *nats.Conn, api string, body []byte, good func([]byte) bool, refused []byte) []byte {
	ctx, cancel := context.WithTimeout(ctx, leaderGrace)
	defer cancel()
	sub, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		return refused
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(api, sub.Subject, body); err != nil {
		return refused
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		switch {
		case err != nil:
			return refused // no other answer within the grace
		case len(msg.Data) == 0 && msg.Header.Get("Status") == "503":
			return refused // no server took it
		case len(msg.Data) == 0:
			continue
		case good(msg.Data):
			return msg.Data
		}
		refused = msg.Data
	}
}
