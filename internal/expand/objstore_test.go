package expand

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// runJetStream starts an embedded JetStream server on a random port (as
// pkg/fleettest does; this package does not depend on it) and returns a
// JetStream context on a connection to it.
func runJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

func TestObjectStoreOpener(t *testing.T) {
	js := runJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "inputs"})
	require.NoError(t, err)

	// 2,000 items in 1 KiB chunks: about 80 chunks, read a few ahead.
	var doc bytes.Buffer
	doc.WriteString(`{"items":[`)
	for i := range 2000 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":"item-%04d","region":"r%d"}`, i, i%3)
	}
	doc.WriteString(`]}`)
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "jobs/items.json", Opts: &jetstream.ObjectMetaOptions{ChunkSize: 1024}}, bytes.NewReader(doc.Bytes()))
	require.NoError(t, err)
	_, err = obs.AddLink(ctx, "latest.json", &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: "jobs/items.json"}, Bucket: "inputs"})
	require.NoError(t, err)
	_, err = obs.PutBytes(ctx, "empty.json", nil)
	require.NoError(t, err)

	open := NewOpener(t.TempDir(), js)
	for _, ref := range []string{"objstore://inputs/jobs/items.json", "objstore://inputs/latest.json"} {
		spec := &messages.JobSpec{Input: ref, JSONPath: "$.items[*]", GroupBy: "${item.region}"}
		total, groups, err := Count(ctx, spec, open)
		require.NoError(t, err, ref)
		require.Equal(t, int64(2000), total)
		require.Equal(t, map[string]int64{"r0": 667, "r1": 667, "r2": 666}, groups)

		src, err := Open(ctx, spec, open)
		require.NoError(t, err)
		items := collect(t, src)
		require.Len(t, items, 2000)
		require.Equal(t, got{1999, "item-1999", "r1", `{"id":"item-1999","region":"r1"}`}, items[1999])
	}

	// Raw bytes, digest checked at the end.
	rc, err := open(ctx, "objstore://inputs/jobs/items.json")
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Equal(t, doc.Bytes(), b)
	require.NoError(t, rc.Close())
	require.NoError(t, rc.Close())

	// Stopping early releases the consumer.
	src, err := Open(ctx, &messages.JobSpec{Input: "objstore://inputs/jobs/items.json", JSONPath: "$.items[*]"}, open)
	require.NoError(t, err)
	_, err = src.Next()
	require.NoError(t, err)
	require.NoError(t, src.Close())

	_, err = Open(ctx, &messages.JobSpec{Input: "objstore://inputs/empty.json"}, open)
	require.ErrorIs(t, err, ErrMalformedJSON)
	require.ErrorContains(t, err, "empty input")

	_, err = Open(ctx, &messages.JobSpec{Input: "objstore://inputs/nope.json"}, open)
	require.ErrorIs(t, err, jetstream.ErrObjectNotFound)
	require.ErrorContains(t, err, `input objstore://inputs/nope.json: object "nope.json" in bucket "inputs"`)

	_, err = Open(ctx, &messages.JobSpec{Input: "objstore://nobucket/items.json"}, open)
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)

	// A cancelled context stops a read in progress.
	cctx, ccancel := context.WithCancel(ctx)
	src, err = Open(cctx, &messages.JobSpec{Input: "objstore://inputs/jobs/items.json", JSONPath: "$.items[*]"}, open)
	require.NoError(t, err)
	ccancel()
	for {
		_, err = src.Next()
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, context.Canceled)
}

// A reader that pauses longer than the JetStream default timeout (a
// coordinator waiting for its publish window) resumes where it stopped.
// ObjectStore.Get's reader would fail here with a timeout.
func TestObjectStorePausedReader(t *testing.T) {
	js := runJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "inputs"})
	require.NoError(t, err)
	var doc bytes.Buffer
	doc.WriteString(`[`)
	for i := range 500 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":"%d","pad":"%0100d"}`, i, i)
	}
	doc.WriteString(`]`)
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "items.json", Opts: &jetstream.ObjectMetaOptions{ChunkSize: 1024}}, bytes.NewReader(doc.Bytes()))
	require.NoError(t, err)

	short, err := jetstream.New(js.Conn(), jetstream.WithDefaultTimeout(100*time.Millisecond))
	require.NoError(t, err)
	src, err := Open(ctx, &messages.JobSpec{Input: "objstore://inputs/items.json"}, ObjectStoreOpener(short))
	require.NoError(t, err)
	n := 0
	for it, err := range src.All() {
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(n), it.ID)
		n++
		if n == 10 {
			time.Sleep(500 * time.Millisecond) // the pause under test
		}
	}
	require.Equal(t, 500, n)
}
