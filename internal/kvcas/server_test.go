package kvcas_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// The classification against real servers: one node, where every refusal
// is 10071 (and so also matches ErrKeyExists), and three, where writes
// that race an in-flight write are refused with 10164 (which does not),
// and where racing creators of a deleted key get 10164 wrapped by neither
// sentinel (docs/jetstream.md §10).

func TestOneNode(t *testing.T) {
	srv := fleettest.RunServer(t)
	kv := newBucket(t, srv.JS(), 1)
	codes, unwrapped := testCAS(t, kv)
	require.Zero(t, codes[jetstream.JSErrCodeStreamWrongLastSequenceConstant], "one node refuses with 10071 only")
	require.NotZero(t, codes[jetstream.JSErrCodeStreamWrongLastSequence])
	require.Zero(t, unwrapped, "10071 always matches ErrKeyExists")
}

func TestThreeNodes(t *testing.T) {
	c := fleettest.RunCluster(t, 3)
	kv := newBucket(t, c.JS(), 3)
	c.WaitForStreamLeader(t, "KV_cas")
	codes, unwrapped := testCAS(t, kv)
	require.NotZero(t, codes[jetstream.JSErrCodeStreamWrongLastSequenceConstant],
		"racing writers on three nodes meet 10164 (docs/jetstream.md §10)")
	require.NotZero(t, unwrapped, "racing creators of a deleted key meet an unwrapped 10164")
}

func newBucket(t *testing.T, js jetstream.JetStream, replicas int) jetstream.KeyValue {
	kv, err := js.CreateKeyValue(testCtx(t, 30*time.Second), jetstream.KeyValueConfig{Bucket: "cas", Replicas: replicas, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	return kv
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testCAS runs the compare-and-set cases on kv and returns how often each
// API error code refused a write, and how many refusals matched neither
// ErrKeyExists nor ErrKeyRevisionMismatch.
func testCAS(t *testing.T, kv jetstream.KeyValue) (codes map[jetstream.ErrorCode]int, unwrapped int) {
	ctx := testCtx(t, 60*time.Second)
	codes = map[jetstream.ErrorCode]int{}
	var mu sync.Mutex
	// refused checks one refusal the way nats.go returned it and counts
	// its code. It may run in any goroutine.
	refused := func(op string, err error) bool {
		t.Helper()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			t.Errorf("%s: not refused", op)
		case !kvcas.IsConflict(err) || kvcas.IsPermanent(err):
			t.Errorf("%s: %v: want a conflict", op, err)
		case !errors.As(err, &apiErr):
			t.Errorf("%s: %v: no API error", op, err)
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence && !errors.Is(err, jetstream.ErrKeyExists):
			// The trap: an Update conflict matches ErrKeyExists here ...
			t.Errorf("%s: %v: 10071 does not match ErrKeyExists", op, err)
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant && op == "update" && errors.Is(err, jetstream.ErrKeyExists):
			// ... and not here, where only ErrKeyRevisionMismatch says it.
			t.Errorf("%s: %v: 10164 matches ErrKeyExists", op, err)
		case apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence && apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			t.Errorf("%s: refused with API error %d: %v", op, apiErr.ErrorCode, err)
		default:
			mu.Lock()
			codes[apiErr.ErrorCode]++
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
				unwrapped++ // Create over a delete marker, refused: only the code tells
			}
			mu.Unlock()
			return true
		}
		return false
	}

	// Create, then Create again: the key exists.
	rev, err := kvcas.Write(ctx, kv, "k", []byte("1"), 0)
	require.NoError(t, err)
	_, err = kvcas.Write(ctx, kv, "k", []byte("x"), 0)
	require.True(t, refused("create", err))
	require.ErrorIs(t, err, jetstream.ErrKeyExists)

	// Update at the latest revision, then at the one before.
	next, err := kvcas.Write(ctx, kv, "k", []byte("2"), rev)
	require.NoError(t, err)
	require.Greater(t, next, rev)
	_, err = kvcas.Write(ctx, kv, "k", []byte("x"), rev)
	require.True(t, refused("update", err))
	require.ErrorIs(t, err, jetstream.ErrKeyRevisionMismatch)

	// A deleted key can be created again, once.
	require.NoError(t, kv.Delete(ctx, "k"))
	_, err = kvcas.Write(ctx, kv, "k", []byte("3"), 0)
	require.NoError(t, err)
	_, err = kvcas.Write(ctx, kv, "k", []byte("x"), 0)
	require.True(t, refused("create", err))

	// Racing writers, each reading then writing at what it read, until
	// each has written a few times: every refusal must be a conflict.
	const writers, wins = 8, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for won := 0; won < wins && ctx.Err() == nil; {
				e, err := kv.Get(ctx, "race")
				var rev uint64
				switch {
				case errors.Is(err, jetstream.ErrKeyNotFound):
				case err != nil:
					t.Errorf("get: %v", err)
					return
				default:
					rev = e.Revision()
				}
				op := "update"
				if rev == 0 {
					op = "create"
				}
				_, err = kvcas.Write(ctx, kv, "race", fmt.Appendf(nil, "%d.%d", w, won), rev)
				if err == nil {
					won++
					continue
				}
				if !refused(op, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err())

	// Racing creators of deleted keys: exactly one of them wins each key.
	for round := range 20 {
		key := fmt.Sprintf("del-%d", round)
		_, err := kv.Put(ctx, key, []byte("old"))
		require.NoError(t, err)
		require.NoError(t, kv.Delete(ctx, key))
		var created sync.WaitGroup
		var won int
		for range writers {
			created.Go(func() {
				_, err := kvcas.Write(ctx, kv, key, []byte("new"), 0)
				if err == nil {
					mu.Lock()
					won++
					mu.Unlock()
					return
				}
				refused("create", err)
			})
		}
		created.Wait()
		require.Equal(t, 1, won, key)
	}
	t.Logf("refusals by API error code: %v; matching neither sentinel: %d", codes, unwrapped)
	return codes, unwrapped
}
