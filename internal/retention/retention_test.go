package retention

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// jobs is the coordinator's side as retention sees it: records in memory,
// written by compare-and-set on a revision, and what it was told.
type jobs struct {
	mu       sync.Mutex
	recs     map[string]wire.JobRecord
	revs     map[string]uint64
	followed map[string]bool
	removed  []string
	forgot   []string
	unpaused []string
	specless []string
}

func (j *jobs) put(rec wire.JobRecord) {
	j.recs[rec.Status.ID], j.revs[rec.Status.ID] = rec, j.revs[rec.Status.ID]+1
}

func (j *jobs) Wait(context.Context) error { return nil }

func (j *jobs) Finished(keep func(*messages.JobStatus) bool) []messages.JobStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []messages.JobStatus
	for _, r := range j.recs {
		if st := r.Status; messages.TerminalState(st.State) && keep(&st) {
			out = append(out, st)
		}
	}
	return out
}

func (j *jobs) Followed(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.followed[id]
}

func (j *jobs) Get(_ context.Context, id string) (*wire.JobRecord, uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec, ok := j.recs[id]
	if !ok {
		return nil, 0, ErrNoJob
	}
	return &rec, j.revs[id], nil
}

func (j *jobs) Update(_ context.Context, rec *wire.JobRecord, rev uint64) (uint64, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.revs[rec.Status.ID] != rev {
		return 0, false, nil
	}
	j.put(*rec)
	return j.revs[rec.Status.ID], true, nil
}

func (j *jobs) Remove(_ context.Context, id string, rev uint64, _ time.Duration) (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.revs[id] != rev {
		return false, nil
	}
	delete(j.recs, id)
	j.removed = append(j.removed, id)
	return true, nil
}

func (j *jobs) Forget(rec *wire.JobRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.forgot = append(j.forgot, rec.Status.ID)
}

func (j *jobs) DropPause(_ context.Context, id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.unpaused = append(j.unpaused, id)
}

func (j *jobs) RemoveSpecs(_ context.Context, rec *wire.JobRecord) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.specless = append(j.specless, rec.Status.ID)
	return nil
}

// streams looks streams up on the server and records the purges.
type streams struct {
	js     jetstream.JetStream
	mu     sync.Mutex
	purged map[string][]string // stream → subjects
}

func (s *streams) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return s.js.Stream(ctx, name)
}

func (s *streams) Purge(_ context.Context, stream, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purged[stream] = append(s.purged[stream], subject)
	return nil
}

// A pass cleans up a settled job (its data purged, its budgets forgotten,
// its pause dropped, the record marked cleaned) and deletes a cleaned job
// expired under JobRetention with its events and specs; it leaves alone a
// job the coordinator still follows and one whose late-result window has
// not passed. A second pass has nothing left to do.
func TestPassCleansSettledJobsAndPrunesExpiredOnes(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx := context.Background()
	names, err := messages.NewNames("")
	require.NoError(t, err)
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, provision.Config{DLQMaxBytes: 64 << 20}))

	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	finished := func(id string, ago time.Duration, cleaned bool) wire.JobRecord {
		at := now.Add(-ago)
		rec := wire.JobRecord{Status: messages.JobStatus{ID: id, State: messages.StateSucceeded, FinishedAt: &at}}
		if cleaned {
			rec.Status.CleanupAt, rec.Status.CleanedAt = &at, &at
		}
		return rec
	}
	j := &jobs{recs: map[string]wire.JobRecord{}, revs: map[string]uint64{}, followed: map[string]bool{"held": true}}
	j.put(finished("done", time.Minute, false))
	j.put(finished("held", time.Minute, false))
	j.put(finished("fresh", time.Second, false))
	j.put(finished("old", 2*time.Hour, true))
	s := &streams{js: srv.JS(), purged: map[string][]string{}}
	r := New(Config{JetStream: srv.JS(), Names: names, Jobs: j, Streams: s, Clock: clock.NewManual(now), Logger: zerolog.Nop(),
		JobRetention: time.Hour, CleanupInterval: time.Minute, LateResultWindow: 10 * time.Second, PruneMarkerTTL: time.Minute})

	st, err := r.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, Stats{Cleaned: 1, Pruned: 1, Jobs: []string{"old"}}, st)

	done, _, err := j.Get(ctx, "done")
	require.NoError(t, err)
	require.NotNil(t, done.Status.CleanupAt)
	require.Equal(t, now, *done.Status.CleanedAt)
	require.Equal(t, []string{"done"}, j.forgot)
	require.Equal(t, []string{"done", "old"}, sorted(j.unpaused), "an expired job's data is purged again before its record goes")
	require.Contains(t, s.purged["KV_"+names.ItemsBucket()], "$KV."+names.ItemsBucket()+".*.done.>")
	require.Contains(t, s.purged[names.ResultsStream()], names.JobResultsFilter("done"))
	require.Contains(t, s.purged[names.EventsStream()], names.EventSubject("old", ">"))
	require.NotContains(t, s.purged[names.EventsStream()], names.EventSubject("done", ">"), "a cleaned job keeps its events until it expires")

	require.Equal(t, []string{"old"}, j.removed)
	require.Equal(t, []string{"old"}, j.specless)
	for _, id := range []string{"held", "fresh"} {
		rec, _, err := j.Get(ctx, id)
		require.NoError(t, err)
		require.Nil(t, rec.Status.CleanupAt, id)
	}

	st, err = r.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, Stats{}, st)
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
