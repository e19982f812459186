package itemrun

import (
	"context"
	"encoding/json"
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
