package upload_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An object written without rollups into the uploads bucket (which
// refuses them) reads back whole through nats.go's object store, a second
// object of the same name is refused, and Remove purges it.
func TestPutGetRemoveWithoutRollups(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := messages.MustNames("fleet")
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, provision.Config{DLQMaxBytes: 1 << 20}))
	bucket := names.UploadsBucket()

	data := bytes.Repeat([]byte("0123456789"), 3*upload.ChunkSize/10+7) // 3 chunks and a bit
	info, err := upload.PutBytes(ctx, srv.JS(), bucket, "a/items.json", data)
	require.NoError(t, err)
	require.EqualValues(t, 4, info.Chunks)

	obs, err := srv.JS().ObjectStore(ctx, bucket)
	require.NoError(t, err)
	got, err := obs.GetBytes(ctx, "a/items.json")
	require.NoError(t, err, "nats.go reads it and checks its digest")
	require.Equal(t, data, got)

	_, err = upload.PutBytes(ctx, srv.JS(), bucket, "a/items.json", []byte("other"))
	require.ErrorIs(t, err, upload.ErrExists)

	require.NoError(t, upload.Remove(ctx, srv.JS(), bucket, "a/items.json"))
	_, err = obs.GetInfo(ctx, "a/items.json")
	require.True(t, errors.Is(err, jetstream.ErrObjectNotFound), "%v", err)
	s, err := srv.JS().Stream(ctx, "OBJ_"+bucket)
	require.NoError(t, err)
	st, err := s.Info(ctx)
	require.NoError(t, err)
	// What is left is the chunk of the refused second write: a client
	// without the purge API leaves it to the bucket's TTL.
	require.EqualValues(t, 1, st.State.Msgs, "the object's chunks and info purged")
	require.NoError(t, upload.Remove(ctx, srv.JS(), bucket, "a/items.json"), "removing what is gone is no error")

	_, err = obs.PutBytes(ctx, "b", []byte("x"))
	require.ErrorContains(t, err, "rollup not permitted", "nats.go's Put sends a rollup, which the bucket refuses")
}
