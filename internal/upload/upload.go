// Package upload writes and removes objects of an object store whose
// stream refuses rollups: the uploads bucket, which submitters write
// (internal/provision turns rollups off there). It writes the format
// nats.go's object store reads (chunks on $O.<bucket>.C.<nuid>, the
// object's info on $O.<bucket>.M.<name>), without the Nats-Rollup header
// that nats.go's Put and Delete send and such a stream refuses.
package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ChunkSize is the size of an object's chunks, nats.go's default.
const ChunkSize = 128 * 1024

// ErrExists reports a name already taken in the bucket.
var ErrExists = errors.New("upload: an object of this name exists")

// metaSubject and chunkSubject are where an object's info and chunks are.
func metaSubject(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

func chunkSubject(bucket, id string) string { return "$O." + bucket + ".C." + id }

// Put stores r as object name of bucket and returns its info; the info is
// written only if no object of that name was ever written (ErrExists).
// The chunks already published are purged by the bucket's TTL if the
// write fails.
func Put(ctx context.Context, js jetstream.JetStream, bucket, name string, r io.Reader) (*jetstream.ObjectInfo, error) {
	if name == "" {
		return nil, errors.New("upload: no name")
	}
	id := nuid.Next()
	h := sha256.New()
	info := &jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}},
		Bucket:     bucket, NUID: id,
	}
	var acks []jetstream.PubAckFuture
	buf := make([]byte, ChunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			m := nats.NewMsg(chunkSubject(bucket, id))
			m.Data = append([]byte(nil), buf[:n]...)
			f, perr := js.PublishMsgAsync(m)
			if perr != nil {
				return nil, fmt.Errorf("upload: chunk: %w", perr)
			}
			acks = append(acks, f)
			info.Size += uint64(n)
			info.Chunks++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("upload: reading: %w", err)
		}
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return nil, fmt.Errorf("upload: chunk: %w", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
	info.ModTime = time.Now().UTC()
	data, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	m := nats.NewMsg(metaSubject(bucket, name))
	m.Data = data
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return nil, fmt.Errorf("%w: %q", ErrExists, name)
		}
		return nil, fmt.Errorf("upload: info: %w", err)
	}
	return info, nil
}

// Remove deletes object name of bucket, its info and its chunks, through
// the stream purge API (no rollup). An object that is not there is no
// error.
func Remove(ctx context.Context, js jetstream.JetStream, bucket, name string) error {
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, metaSubject(bucket, name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return fmt.Errorf("upload: info of %q: %w", name, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(metaSubject(bucket, name))); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if info.NUID != "" {
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(chunkSubject(bucket, info.NUID))); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
	}
	return nil
}

// PutBytes is Put of data.
func PutBytes(ctx context.Context, js jetstream.JetStream, bucket, name string, data []byte) (*jetstream.ObjectInfo, error) {
	return Put(ctx, js, bucket, name, bytes.NewReader(data))
}
