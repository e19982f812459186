package pause

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestViewFollowsTheBucket(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx := context.Background()
	kv, err := srv.JS().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fleet_pause"})
	require.NoError(t, err)
	at := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	_, err = kv.Put(ctx, wire.PauseJobKey("before"), []byte(`{"at": "2026-11-27T02:00:00Z"}`))
	require.NoError(t, err)
	_, err = kv.Put(ctx, "unrelated", []byte(`x`))
	require.NoError(t, err)

	v := NewView()
	var mu sync.Mutex
	var changes []string
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Keep(wctx, kv, zerolog.Nop(), func(kind, name string, paused bool) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, kind+":"+name)
		})
	}()
	defer func() { cancel(); <-done }()
	<-v.Ready()
	since, ok := v.Job("before")
	require.True(t, ok, "a pause made before the watch is in the view once it is ready")
	require.Equal(t, at, since)
	require.Equal(t, messages.PausedByJob, v.By("before", "default"))
	require.Empty(t, v.By("other", "default"))

	_, err = kv.Put(ctx, wire.PausePoolKey("gpu"), []byte(`{}`))
	require.NoError(t, err)
	fleettest.WaitFor(t, 5*time.Second, func() error {
		if v.By("other", "gpu") != messages.PausedByPool {
			return errors.New("pool pause not seen")
		}
		return nil
	})
	require.Equal(t, messages.PausedByJob, v.By("before", "gpu"), "the job's own pause comes first")
	require.NoError(t, kv.Delete(ctx, wire.PauseJobKey("before")))
	fleettest.WaitFor(t, 5*time.Second, func() error {
		if _, ok := v.Job("before"); ok {
			return errors.New("resume not seen")
		}
		return nil
	})
	require.Equal(t, []string{"gpu"}, v.Pools())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{Everything + ":", "pool:gpu", "job:before"}, changes)
}

// A pause mark of a newer schema version is left for a process of the
// newer release (docs/contract.md §8): the view does not act on it (the
// job is not paused here, changed is not called) and logs it once, also
// when it is met again; a mark of this version is followed as before.
func TestViewPausesOnAMarkOfANewerSchema(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx := context.Background()
	kv, err := srv.JS().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fleet_pause"})
	require.NoError(t, err)
	data, err := json.Marshal(wire.PauseRecord{At: time.Now()})
	require.NoError(t, err)
	require.Contains(t, string(data), `"v":1`, "a pause mark names its schema version")
	newer := []byte(`{"v": ` + strconv.Itoa(messages.SchemaVersion+1) + `, "at": "2026-11-28T14:00:00Z"}`)
	_, err = kv.Put(ctx, wire.PauseJobKey("before"), newer)
	require.NoError(t, err)

	var logs lockedBuffer
	v := NewView()
	var mu sync.Mutex
	var changes []string
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Keep(wctx, kv, zerolog.New(&logs), func(kind, name string, paused bool) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, kind+":"+name)
		})
	}()
	defer func() { cancel(); <-done }()
	<-v.Ready()
	_, ok := v.Job("before")
	require.True(t, ok, "a mark of a newer schema made before the watch pauses all the same")

	_, err = kv.Put(ctx, wire.PausePoolKey("gpu"), newer)
	require.NoError(t, err)
	// Written after it: once the view has it, it has met the newer one.
	_, err = kv.Put(ctx, wire.PauseJobKey("current"), data)
	require.NoError(t, err)
	fleettest.WaitFor(t, 5*time.Second, func() error {
		if _, ok := v.Job("current"); !ok {
			return errors.New("pause not seen")
		}
		return nil
	})
	require.NotEmpty(t, v.By("other", "gpu"), "a mark of a newer schema made while watching pauses")
	require.Equal(t, []string{"gpu"}, v.Pools())
	mu.Lock()
	require.Equal(t, []string{Everything + ":", messages.PausedByPool + ":gpu", "job:current"}, changes)
	mu.Unlock()
	require.Equal(t, 2, logs.count("pause mark of a newer release: its key pauses, its record is not read"), "each newer mark once")

	// Met again by a fresh view of the same marks: still logged once each.
	v.apply(map[string]time.Time{}, map[string]time.Time{}, entry(t, kv, wire.PauseJobKey("before")), zerolog.New(&logs))
	require.Equal(t, 2, logs.count("pause mark of a newer release: its key pauses, its record is not read"))
}

func entry(t *testing.T, kv jetstream.KeyValue, key string) jetstream.KeyValueEntry {
	t.Helper()
	e, err := kv.Get(context.Background(), key)
	require.NoError(t, err)
	return e
}

// lockedBuffer is a log sink safe for the view's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}
