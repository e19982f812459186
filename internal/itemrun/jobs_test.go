package itemrun

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A job id may be reused once retention deleted the earlier job: the
// map_ended an agent saw for the earlier job does not make it drop the new
// job's items once it loads the new, running record.
func TestJobCacheForgetsTheEndOfAnEarlierJobOfTheSameID(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := messages.MustNames("")
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, provision.Config{DLQMaxBytes: 1 << 20}))
	kv, err := srv.JS().KeyValue(ctx, names.JobsBucket())
	require.NoError(t, err)
	put := func(state, mapReason string) {
		t.Helper()
		rec := wire.JobRecord{Spec: &messages.JobSpec{ID: "j", AgentTemplate: []messages.Step{{Handler: "h"}}},
			Status: messages.JobStatus{ID: "j", State: state, MapReason: mapReason}}
		data, err := json.Marshal(&rec)
		require.NoError(t, err)
		_, err = kv.Put(ctx, "j", data)
		require.NoError(t, err)
	}
	c := newJobCache(kv, kvleader.New(srv.JS(), names.JobsBucket()).Get)
	put(messages.StateSucceeded, messages.CompletionAllCompleted)
	c.markEnded("j")
	c.forget("j")
	_, err = c.get(ctx, "j")
	require.NoError(t, err)
	require.True(t, c.isEnded("j"), "the job's map phase ended")

	// Retention deleted it; a new job of that id runs.
	c.forget("j")
	put(messages.StateRunning, "")
	_, err = c.get(ctx, "j")
	require.NoError(t, err)
	require.False(t, c.isEnded("j"))
}

// The items of a new job arrive on every slot at once: the job is read
// and compiled once, and every slot asking meanwhile gets that load.
func TestJobCacheLoadsANewJobOnce(t *testing.T) {
	data := recordOf(t, "j", true)
	release := make(chan struct{})
	var reads atomic.Int64
	c := newJobCache(&laggingReplica{}, func(context.Context, string) ([]byte, uint64, error) {
		reads.Add(1)
		<-release
		return data, 1, nil
	})
	const slots = 16
	got := make(chan *job, slots)
	for range slots {
		go func() {
			j, err := c.get(t.Context(), "j")
			if err != nil {
				t.Error(err)
			}
			got <- j
		}()
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.loading["j"] != nil
	}, 5*time.Second, time.Millisecond)
	close(release)
	first := <-got
	require.NotNil(t, first)
	for range slots - 1 {
		require.Same(t, first, <-got)
	}
	require.EqualValues(t, 1, reads.Load())

	// A waiter whose context ends stops waiting.
	release = make(chan struct{})
	c.forget("j")
	loaded := make(chan struct{})
	go func() { defer close(loaded); _, _ = c.get(t.Context(), "j") }()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.loading["j"] != nil
	}, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.get(ctx, "j")
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	<-loaded
}
