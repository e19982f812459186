package pause

import (
	"context"
	"errors"
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
