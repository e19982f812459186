package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// laggingReplica answers every direct get of the jobs bucket as a follower
// that has not caught up yet: "not found" for a job that exists.
type laggingReplica struct {
	misses atomic.Int64
}

func (r *laggingReplica) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	r.misses.Add(1)
	return nil, jetstream.ErrKeyNotFound
}

// staticLeader is a stream leader's answer for one key.
func staticLeader(data []byte, err error) leaderGet {
	return func(context.Context, string) ([]byte, uint64, error) { return data, 1, err }
}

func recordOf(t *testing.T, id string, spec bool) []byte {
	t.Helper()
	rec := wire.JobRecord{Status: messages.JobStatus{ID: id, State: messages.StateRunning}}
	if spec {
		rec.Spec = &messages.JobSpec{ID: id, AgentTemplate: []messages.Step{{Handler: "ok"}}}
	} else {
		rec.Status.State = messages.StateRejected
	}
	data, err := json.Marshal(&rec)
	require.NoError(t, err)
	return data
}

// oneRecord is a replica that holds data for every key.
type oneRecord struct{ data []byte }

func (r oneRecord) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	return kvEntry{key: key, value: r.data}, nil
}

type kvEntry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
}

func (e kvEntry) Value() []byte { return e.value }

// A replica's "not found", or its older rejected record of the id, is
// never final: the stream leader decides, and an error reading it is not
// "not found" either (the item is retried later).
func TestJobCacheAsksTheLeaderBeforeNotFound(t *testing.T) {
	errLeader := errors.New("no responders")
	cases := []struct {
		name    string
		replica recordGetter
		leader  leaderGet
		wantErr error // nil: the job loads
		anyErr  bool  // an error that is not errJobNotFound
	}{
		{name: "replica lags, leader has it", replica: &laggingReplica{}, leader: staticLeader(recordOf(t, "j", true), nil)},
		{name: "replica holds the rejected record, leader the accepted one", replica: oneRecord{recordOf(t, "j", false)}, leader: staticLeader(recordOf(t, "j", true), nil)},
		{name: "leader says absent", replica: &laggingReplica{}, leader: staticLeader(nil, nil), wantErr: errJobNotFound},
		{name: "leader says rejected", replica: &laggingReplica{}, leader: staticLeader(recordOf(t, "j", false), nil), wantErr: errJobNotFound},
		{name: "leader unreachable", replica: &laggingReplica{}, leader: staticLeader(nil, errLeader), anyErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newJobCache(tc.replica, tc.leader)
			j, err := c.get(context.Background(), "j")
			switch {
			case tc.anyErr:
				require.ErrorIs(t, err, errLeader)
				require.NotErrorIs(t, err, errJobNotFound)
			case tc.wantErr != nil:
				require.ErrorIs(t, err, tc.wantErr)
			default:
				require.NoError(t, err)
				require.Equal(t, "j", j.id)
			}
		})
	}
}

// A poison message that is an item of a job (here a reduce reference the
// agent refuses) leaves the work stream with a dead_lettered result, so the
// job counts it; the message is termed only once the result is stored.
func TestPoisonItemIsCounted(t *testing.T) {
	f := newFailureAgent(t)
	j := f.job(t, "pj", `[{"handler":"ok"}]`, "")
	data, err := json.Marshal(wire.WorkItem{JobID: j.id, ItemID: "i1", Index: 7, Reduce: &messages.ReduceInput{}})
	require.NoError(t, err)
	m := f.deliverRaw(t, testNames.WorkSubject(messages.DefaultPool, j.id), data)
	require.Equal(t, "term", m.disposition())
	require.Len(t, f.dlq.entries, 1)
	require.Equal(t, messages.ReasonPoison, f.dlq.entries[0].Reason)
	require.Len(t, f.pub.results, 1, "the job must count the item")
	res, err := wire.DecodeResults(f.pub.results[0].Data, nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, messages.OutcomeDeadLettered, res[0].Outcome)
	require.Equal(t, messages.ReasonPoison, res[0].Reason)
	require.EqualValues(t, 7, res[0].Index)
	require.Equal(t, "pj", res[0].JobID)

	// A job the stream leader does not know gets no result: no job counts
	// it, and a later job of that id must not find one.
	f = newFailureAgent(t)
	f.a.jobs = newJobCache(&laggingReplica{}, staticLeader(nil, nil))
	data, err = json.Marshal(wire.WorkItem{JobID: "gone", ItemID: "i1", Index: 7})
	require.NoError(t, err)
	m = f.deliverRaw(t, testNames.WorkSubject(messages.DefaultPool, "gone"), data)
	require.Equal(t, "term", m.disposition())
	require.Len(t, f.dlq.entries, 1)
	require.Equal(t, messages.ReasonJobGone, f.dlq.entries[0].Reason)
	require.Empty(t, f.pub.results)
}

// deliverRaw runs one delivery of a message with body data on subject
// through process and the ack loop.
func (f *failureAgent) deliverRaw(t *testing.T, subject string, data []byte) *recMsg {
	t.Helper()
	return f.deliverRawN(t, subject, data, 1)
}

// deliverRawN is deliverRaw of delivery n.
func (f *failureAgent) deliverRawN(t *testing.T, subject string, data []byte, n uint64) *recMsg {
	t.Helper()
	m := &recMsg{subject: subject, data: data, md: jetstream.MsgMetadata{NumDelivered: n, Sequence: jetstream.SequencePair{Stream: 42}}}
	f.a.results = make(chan pendingResult, 16)
	f.a.acks = make(chan pendingAck, 16)
	f.a.safeProcessOn(context.Background(), m, &hbSlot{}, nil)
	close(f.a.results)
	f.a.batchLoop()
	f.a.ackLoop()
	return m
}

// TestLaggingReplicaLosesNoItem runs a job on a 3-node cluster through an
// agent whose every direct get of the jobs bucket answers "not found", as
// a follower that has not caught up does: the agent asks the stream leader,
// runs every item, and the job ends with exact counts and nothing
// dead-lettered. (An agent that took the replica's answer as final
// dead-lettered every item as job_not_found, with no result, and the job
// never ended.)
func TestLaggingReplicaLosesNoItem(t *testing.T) {
	checkLeaks(t)
	c := fleettest.RunCluster(t, 3)
	ctx := testCtx(t, 120*time.Second)
	prov := provision.Config{Replicas: 3, AckWait: 30 * time.Second, MaxDeliver: 20, DLQMaxBytes: 16 << 20}
	cnc := c.Connect(t)
	runCoordinator(t, ctx, cnc, coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 20 * time.Millisecond})
	c.WaitForStreamLeader(t, "KV_"+testNames.JobsBucket())

	replica := &laggingReplica{}
	a := New(c.ConnectNode(t, 1), testhooks.WithAgent(Config{Name: "lagging", ShutdownTimeout: 5 * time.Second}, testhooks.Agent{Provision: prov})).HandleBuiltins()
	a.jobsReplica = func(recordGetter) recordGetter { return replica }
	defer runAgent(t, ctx, a)()

	const n = 200
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"id": fmt.Sprintf("i%d", i)}
	}
	spec, err := json.Marshal(map[string]any{"id": "lag", "items": items, "agent_template": []map[string]any{{"handler": "noop"}}})
	require.NoError(t, err)
	cl, err := client.New(c.Connect(t, nats.MaxReconnects(-1)), "")
	require.NoError(t, err)
	_, err = cl.JobSubmit(ctx, spec)
	require.NoError(t, err)
	waitCtx, cancelWait := context.WithTimeout(ctx, 60*time.Second)
	defer cancelWait()
	var last *messages.JobStatus
	st, err := cl.JobWait(waitCtx, "lag", 20*time.Millisecond, func(s *messages.JobStatus) { last = s })
	require.NoError(t, err, "the job did not end; last status %+v", last)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Items)
	require.EqualValues(t, n, st.Succeeded)
	require.Zero(t, st.DeadLettered)
	require.Positive(t, replica.misses.Load(), "the agent read through the lagging replica")
}
