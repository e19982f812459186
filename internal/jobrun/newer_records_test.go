package jobrun

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

// lockedBuffer is a log sink safe for the coordinator's goroutines.
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

// A cancel request of a newer schema version is left for a leader of the
// newer release (docs/contract.md §8): the leader logs it once, neither
// cancels the job nor deletes the request; one of this version, written
// after it, is carried out as before.
func TestCancelRequestOfANewerSchemaIsLeftAlone(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	var logs lockedBuffer
	c, err := New(srv.Connect(t), Config{Provision: Provision(testProv), StatusInterval: 20 * time.Millisecond, Holder: "a", Logger: zerolog.New(&logs)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	p := &running{cancel: stop, done: make(chan error, 1)}
	go func() { p.done <- c.Run(rctx) }()
	defer p.stop(t)
	<-c.Ready()
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if !c.IsLeader() {
			return errors.New("not leading yet")
		}
		return nil
	})

	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	for _, id := range []string{"newer", "current"} {
		_, err = cl.Submit(ctx, []byte(`{"id": "`+id+`", "items": [1, 2], "agent_template": [{"handler": "noop"}]}`))
		require.NoError(t, err)
		waitState(t, cl, id, messages.StateRunning)
	}

	newer := []byte(`{"v": ` + strconv.Itoa(messages.SchemaVersion+1) + `, "by": "b", "at": "2026-11-28T14:00:00Z", "what": "a member of the next release"}`)
	rev, err := c.control.Put(ctx, wire.CancelKey("newer"), newer)
	require.NoError(t, err)
	// Written after it: the leader's watch carries the two out in order,
	// so once this one is done the newer one has been met.
	data, err := json.Marshal(cancelRequest{By: "b", At: time.Now()})
	require.NoError(t, err)
	require.Contains(t, string(data), `"v":1`, "a cancel request names its schema version")
	_, err = c.control.Put(ctx, wire.CancelKey("current"), data)
	require.NoError(t, err)
	waitState(t, cl, "current", messages.StateCancelled)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if _, err := c.control.Get(ctx, wire.CancelKey("current")); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("the current cancel request is still there")
		}
		return nil
	})

	st, err := c.Status(ctx, "newer")
	require.NoError(t, err)
	require.Equal(t, messages.StateRunning, st.State, "a cancel request of a newer schema is not carried out")
	e, err := c.control.Get(ctx, wire.CancelKey("newer"))
	require.NoError(t, err, "a cancel request of a newer schema is not deleted")
	require.Equal(t, rev, e.Revision())
	require.Equal(t, 1, logs.count("cancel request left for a coordinator of a newer release"))
}

// The pause mark of an ended job is deleted, unless it is of a newer
// schema version: that one is left for a coordinator of the newer
// release (docs/contract.md §8). A mark this coordinator writes names its
// schema version.
func TestPauseMarkOfANewerSchemaIsNotDeleted(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	var logs lockedBuffer
	c, err := New(srv.Connect(t), Config{Provision: Provision(testProv), Holder: "a", Logger: zerolog.New(&logs)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	p := &running{cancel: stop, done: make(chan error, 1)}
	go func() { p.done <- c.Run(rctx) }()
	defer p.stop(t)
	<-c.Ready()

	require.NoError(t, c.putPause(ctx, wire.PauseJobKey("current")))
	e, err := c.pauseKV.Get(ctx, wire.PauseJobKey("current"))
	require.NoError(t, err)
	require.Contains(t, string(e.Value()), `"v":1`)
	newer := []byte(`{"v": ` + strconv.Itoa(messages.SchemaVersion+1) + `, "at": "2026-11-28T14:00:00Z"}`)
	rev, err := c.pauseKV.Put(ctx, wire.PauseJobKey("newer"), newer)
	require.NoError(t, err)

	c.dropPause(ctx, "current")
	c.dropPause(ctx, "newer")
	_, err = c.pauseKV.Get(ctx, wire.PauseJobKey("current"))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "an ended job's pause mark is deleted")
	e, err = c.pauseKV.Get(ctx, wire.PauseJobKey("newer"))
	require.NoError(t, err, "a pause mark of a newer schema is not deleted")
	require.Equal(t, rev, e.Revision())
	require.Equal(t, 1, logs.count("pause mark of an ended job left for a coordinator of a newer release"))
}
