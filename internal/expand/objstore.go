package expand

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// objectReadStall bounds how long a read of an object waits for its next
// chunk (the object was replaced and its chunks purged, or the server is
// gone).
const objectReadStall = time.Minute

// objectPrefetch is how many chunks (128 KiB each by default) are fetched
// ahead of the reader.
const objectPrefetch = 8

// ObjectStoreOpener opens refs of the form objstore://<bucket>/<name>
// (following a link to another object once).
//
// It does not use ObjectStore.Get, whose reader must be drained within the
// JetStream default timeout (5s) when ctx has no deadline and whose push
// delivery is not paced by the reader. It reads the object's chunks with an
// ordered pull consumer instead, a few chunks ahead of the reader, so a
// reader that pauses for minutes (a coordinator waiting for its publish
// window) holds about 1 MiB and resumes where it stopped; the SHA-256
// digest is checked at the end. ctx bounds the whole read.
func ObjectStoreOpener(js jetstream.JetStream) Opener {
	return func(ctx context.Context, ref string) (io.ReadCloser, error) {
		bucket, name, err := ParseObjectRef(ref)
		if err != nil {
			return nil, err
		}
		return openObject(ctx, js, bucket, name, 0)
	}
}

func openObject(ctx context.Context, js jetstream.JetStream, bucket, name string, links int) (io.ReadCloser, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("object store bucket %q: %w", bucket, err)
	}
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("object %q in bucket %q: %w", name, bucket, err)
	}
	if o := info.Opts; o != nil && o.Link != nil {
		if o.Link.Name == "" || links > 0 {
			return nil, errorf(ErrRef, "object %q in bucket %q links to %q in bucket %q, which is not an object", name, bucket, o.Link.Name, o.Link.Bucket)
		}
		return openObject(ctx, js, o.Link.Bucket, o.Link.Name, links+1)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("object %q in bucket %q: digest %q: %w", name, bucket, info.Digest, err)
	}
	r := &objectReader{ctx: ctx, name: name, size: info.Size, want: want, sum: sha256.New()}
	if info.Size == 0 {
		return r, nil
	}
	cons, err := js.OrderedConsumer(ctx, "OBJ_"+bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$O." + bucket + ".C." + info.NUID},
	})
	if err != nil {
		return nil, fmt.Errorf("object %q in bucket %q: %w", name, bucket, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(objectPrefetch))
	if err != nil {
		return nil, fmt.Errorf("object %q in bucket %q: %w", name, bucket, err)
	}
	r.msgs = msgs
	return r, nil
}

// objectReader reads an object's chunks in order. Not safe for concurrent
// use.
type objectReader struct {
	ctx  context.Context
	name string
	msgs jetstream.MessagesContext
	size uint64
	got  uint64
	want []byte
	sum  hash.Hash
	buf  []byte
	err  error
}

func (r *objectReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.got == r.size {
			r.err = io.EOF
			if !bytes.Equal(r.sum.Sum(nil), r.want) {
				r.err = fmt.Errorf("object %q: %w", r.name, jetstream.ErrDigestMismatch)
			}
			continue
		}
		r.buf, r.err = r.chunk()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *objectReader) chunk() ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, objectReadStall)
	defer cancel()
	msg, err := r.msgs.Next(jetstream.NextContext(ctx))
	switch {
	case err == nil:
	case r.ctx.Err() != nil:
		return nil, r.ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("object %q: no data for %v after %d of %d bytes (replaced, or the server is unavailable)", r.name, objectReadStall, r.got, r.size)
	default:
		return nil, fmt.Errorf("object %q: %w", r.name, err)
	}
	data := msg.Data()
	r.got += uint64(len(data))
	if r.got > r.size {
		return nil, fmt.Errorf("object %q: more data than its size (%d bytes)", r.name, r.size)
	}
	r.sum.Write(data)
	return data, nil
}

func (r *objectReader) Close() error {
	if r.msgs != nil {
		r.msgs.Stop()
		r.msgs = nil
	}
	if r.err == nil {
		r.err = errors.New("object reader closed")
	}
	return nil
}
