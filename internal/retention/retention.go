package retention

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Retention (docs/deploy.md, "Retention"): what a job leaves in
// JetStream is removed in two steps.
//
//   - Settle cleanup: once a job has finished, its late-result window has
//     passed and none of its dead letters is left in the DLQ, its item
//     state (with its delete markers), budget, breaker keys, results,
//     leftover work messages and objects in the inputs bucket are purged.
//     The record says so (cleanup_at when it begins, cleaned_at when it
//     ends) and keeps the final counts. From cleanup_at on a DLQ replay
//     cannot reopen the job: its counts are rebuilt from the results,
//     which are gone. A job with dead letters is therefore cleaned only
//     when its last one has left the DLQ (replayed or purged), or when its
//     record expires.
//   - Expiry: JobRetention after it finished, a job's record is deleted,
//     with its events and its submission, after the cleanup (forced then,
//     dead letters or not). jobs.prune does the same on demand.
//
// Every step is a purge by subject or a compare-and-set on the record, so
// a pass is harmless to repeat and to run on several coordinators at once:
// a crash mid-cleanup leaves cleanup_at without cleaned_at, and the next
// pass (here or elsewhere) does it again.

// Defaults of the retention settings.
const (
	// DefaultJobRetention is how long a finished job's record is kept, like
	// River's completed-job retention.
	DefaultJobRetention = 7 * 24 * time.Hour
	// DefaultCleanupInterval is how often the retention pass runs.
	DefaultCleanupInterval = time.Minute
	// DefaultPruneMarkerTTL is how long the marker of a deleted job record
	// stays in the jobs bucket, so that watchers (the coordinators' job
	// index, the dashboard) see the deletion.
	DefaultPruneMarkerTTL = time.Hour
	// MinJobRetention is the least age at which a record may be deleted:
	// the id is then free, and a new job of that id must not have its
	// submission and work messages dropped by the jobs and work streams'
	// duplicate windows, which remember the old job's message ids.
	MinJobRetention = 10 * time.Minute
	// settleGrace is added to the late-result window: the runner times its
	// window from when it saw the finish, a moment after FinishedAt.
	settleGrace = 5 * time.Second
)

// Stats says what a retention pass or a prune did.
type Stats struct {
	Cleaned int      // settle cleanups finished
	Pruned  int      // records deleted (or that would be, in a dry run)
	Failed  int      // jobs whose cleanup or deletion failed (next pass)
	Jobs    []string // ids pruned, at most messages.MaxPruneListed
}

// Run runs the retention pass every CleanupInterval until ctx ends. It
// is safe to run on several coordinators of a prefix at once.
func (c *Retention) Run(ctx context.Context) {
	for {
		if err := c.jobs.Wait(ctx); err == nil {
			st, err := c.Pass(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				c.log.Warn().Err(err).Msg("retention pass failed; trying again next interval")
			case st.Cleaned+st.Pruned+st.Failed > 0:
				c.log.Info().Int("cleaned", st.Cleaned).Int("pruned", st.Pruned).Int("failed", st.Failed).Msg("retention pass")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.cfg.CleanupInterval):
		}
	}
}

// Pass cleans up every settled job and deletes the records expired
// under JobRetention, once.
func (c *Retention) Pass(ctx context.Context) (Stats, error) {
	var st Stats
	now := c.clock.Now()
	withDLQ, err := c.jobsWithDeadLetters(ctx)
	if err != nil {
		return st, err
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(retentionWorkers)
	// The jobs with something to do: not cleaned yet, or expired.
	todo := c.jobs.Finished(func(s *messages.JobStatus) bool {
		return c.windowOver(s, now) && (s.CleanedAt == nil || !now.Before(s.FinishedAt.Add(c.cfg.JobRetention)))
	})
	for _, s := range todo {
		switch {
		case c.expired(&s, now, c.cfg.JobRetention):
			g.Go(func() error { c.pruneOne(gctx, s.ID, c.cfg.JobRetention, false, &st, &mu); return nil })
		case s.CleanedAt == nil && s.State != messages.StateRejected && (!withDLQ[s.ID] || s.CleanupAt != nil) && c.settled(&s, now):
			// A cleanup that began is finished whatever reached the DLQ since.
			g.Go(func() error {
				done, err := c.cleanupJob(gctx, s.ID, false)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					st.Failed++
					c.log.Warn().Err(err).Str("job_id", s.ID).Msg("cleanup failed; the next pass tries again")
				case done:
					st.Cleaned++
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	return st, ctx.Err()
}

// retentionWorkers is how many jobs a retention pass or a prune handles
// at once (each is a handful of requests to the server).
const retentionWorkers = 8

// JobPrune deletes the records (and what is left of their data) of jobs
// that finished at least req.OlderThan ago (unset: Config.JobRetention;
// below MinJobRetention: a *messages.APIError naming older_than), as
// jobs.prune does. With req.DryRun it only lists them.
func (c *Retention) JobPrune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	olderThan := c.cfg.JobRetention
	if req.OlderThan != nil {
		olderThan = req.OlderThan.D()
	}
	if olderThan < MinJobRetention {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "older_than", Message: fmt.Sprintf(
			"%s, want >= %s: a new job reusing a pruned id sooner would have its messages dropped as duplicates", messages.Duration(olderThan), messages.Duration(MinJobRetention))}
	}
	st, err := c.Prune(ctx, olderThan, req.DryRun)
	if err != nil {
		return nil, err
	}
	return &messages.PruneReply{Pruned: st.Pruned, Jobs: st.Jobs, Failed: st.Failed, DryRun: req.DryRun}, nil
}

// Prune deletes the records (and what is left of their data) of jobs that
// finished at least olderThan ago. With dryRun it only counts them.
func (c *Retention) Prune(ctx context.Context, olderThan time.Duration, dryRun bool) (Stats, error) {
	var st Stats
	if err := c.jobs.Wait(ctx); err != nil {
		return st, err
	}
	now := c.clock.Now()
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(retentionWorkers)
	todo := c.jobs.Finished(func(s *messages.JobStatus) bool {
		return c.windowOver(s, now) && !now.Before(s.FinishedAt.Add(olderThan))
	})
	for _, s := range todo {
		if !c.expired(&s, now, olderThan) {
			continue
		}
		if dryRun {
			st.Pruned++
			st.list(s.ID)
			continue
		}
		g.Go(func() error { c.pruneOne(gctx, s.ID, olderThan, true, &st, &mu); return nil })
	}
	_ = g.Wait()
	return st, ctx.Err()
}

func (st *Stats) list(id string) {
	if len(st.Jobs) < messages.MaxPruneListed {
		st.Jobs = append(st.Jobs, id)
	}
}

func (c *Retention) pruneOne(ctx context.Context, id string, olderThan time.Duration, explicit bool, st *Stats, mu *sync.Mutex) {
	done, err := c.pruneJob(ctx, id, olderThan)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err != nil:
		st.Failed++
		c.log.Warn().Err(err).Str("job_id", id).Msg("deleting an expired job failed; the next pass tries again")
	case done:
		st.Pruned++
		st.list(id)
		c.pruned.Inc()
		ev := c.log.Debug()
		if explicit {
			ev = c.log.Info()
		}
		ev.Str("job_id", id).Msg("job record deleted")
	}
}

// settled reports whether a finished job's late-result window is over
// and nothing here still follows it (a lingering runner, a replay's hold).
func (c *Retention) settled(s *messages.JobStatus, now time.Time) bool {
	return c.windowOver(s, now) && !c.jobs.Followed(s.ID)
}

// windowOver reports whether a job finished and its late-result window
// (with a grace) has passed, by its record alone.
func (c *Retention) windowOver(s *messages.JobStatus, now time.Time) bool {
	return messages.TerminalState(s.State) && s.FinishedAt != nil &&
		!now.Before(s.FinishedAt.Add(c.cfg.LateResultWindow+settleGrace))
}

// expired reports whether a settled job finished at least age ago.
func (c *Retention) expired(s *messages.JobStatus, now time.Time, age time.Duration) bool {
	return c.settled(s, now) && !now.Before(s.FinishedAt.Add(age))
}

// jobsWithDeadLetters returns the jobs that have entries in the DLQ.
func (c *Retention) jobsWithDeadLetters(ctx context.Context) (map[string]bool, error) {
	stream, err := c.streams.Stream(ctx, c.names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("coordinator: DLQ stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(c.names.DLQFilter()))
	if err != nil {
		return nil, fmt.Errorf("coordinator: DLQ subjects: %w", err)
	}
	jobs := map[string]bool{}
	for subj, n := range info.State.Subjects {
		if _, job, ok := wire.ParseDLQ(c.names, subj); ok && n > 0 {
			jobs[job] = true
		}
	}
	// An agent's dead letter reaches the DLQ stream from its pool's stream
	// a moment after it is stored there: the pools' streams count too.
	pools := c.js.StreamNames(ctx, jetstream.WithStreamListSubject(wire.PoolDLQStreamsFilter(c.names)))
	for name := range pools.Name() {
		ps, err := c.streams.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("coordinator: pool DLQ stream %s: %w", name, err)
		}
		info, err := ps.Info(ctx, jetstream.WithSubjectFilter(wire.PoolDLQStreamsFilter(c.names)))
		if err != nil {
			return nil, fmt.Errorf("coordinator: pool DLQ stream %s subjects: %w", name, err)
		}
		for subj, n := range info.State.Subjects {
			if i := strings.LastIndexByte(subj, '.'); i >= 0 && n > 0 {
				jobs[subj[i+1:]] = true
			}
		}
	}
	if err := pools.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("coordinator: pool DLQ streams: %w", err)
	}
	return jobs, nil
}

// cleanupJob removes a settled job's data and records it. force skips
// nothing but the checks a prune has made (dead letters may remain). It
// reports whether the job is cleaned.
func (c *Retention) cleanupJob(ctx context.Context, id string, force bool) (bool, error) {
	rec, rev, err := c.jobs.Get(ctx, id)
	if errors.Is(err, ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st := &rec.Status
	if st.CleanedAt != nil {
		return true, nil
	}
	if !c.settled(st, c.clock.Now()) {
		return false, nil // reopened, or not ours to touch yet
	}
	if st.CleanupAt == nil {
		// From here on a replay refuses to reopen the job (ensureRunner).
		now := c.clock.Now()
		st.CleanupAt = &now
		var ok bool
		if rev, ok, err = c.jobs.Update(ctx, rec, rev); err != nil || !ok {
			return false, err // changed meanwhile: the next pass decides again
		}
	}
	if err := c.purgeJobData(ctx, rec); err != nil {
		return false, err
	}
	now := c.clock.Now()
	st.CleanedAt = &now
	_, ok, err := c.jobs.Update(ctx, rec, rev)
	if err != nil || !ok {
		return false, err
	}
	c.jobs.Forget(rec)
	c.cleaned.Inc()
	c.log.Debug().Str("job_id", id).Bool("forced", force).Msg("settled job cleaned up")
	return true, nil
}

// purgeJobData purges what a job left in JetStream besides its record,
// events and submission. Each purge is by subject: no delete markers, and
// harmless to repeat.
func (c *Retention) purgeJobData(ctx context.Context, rec *wire.JobRecord) error {
	id, n := rec.Status.ID, c.names
	purges := []struct{ stream, subject string }{
		{kvStreamName(n.ItemsBucket()), kvSubject(n.ItemsBucket(), "*."+id+".>")},
		// Budgets and breakers are keyed <pool>.<job>[.<step>].
		{kvStreamName(n.BudgetBucket()), kvSubject(n.BudgetBucket(), "*."+id)},
		{kvStreamName(n.BreakerBucket()), kvSubject(n.BreakerBucket(), "*."+id)},
		{kvStreamName(n.BreakerBucket()), kvSubject(n.BreakerBucket(), "*."+id+".>")},
		{n.ResultsStream(), n.JobResultsFilter(id)},
		{n.WorkStream(), n.WorkSubject("*", id)},
	}
	// A retry parked after the map-end purge (an agent still finishing
	// an item) would otherwise fire into a settled job.
	for _, pool := range wire.JobPools(rec) {
		for _, f := range wire.JobParkFilters(n, pool, id) {
			purges = append(purges, struct{ stream, subject string }{n.ParkStream(pool), f})
		}
	}
	for _, p := range purges {
		if err := c.streams.Purge(ctx, p.stream, p.subject); err != nil {
			return err
		}
	}
	c.jobs.DropPause(ctx, id) // a job that ended paused
	return c.deleteJobObjects(ctx, rec)
}

// deleteJobObjects deletes the job's objects: its adopted input in the
// inputs bucket, the map results of each reduce generation in its pool's
// reduce store, and their meta messages, which a delete leaves as markers.
func (c *Retention) deleteJobObjects(ctx context.Context, rec *wire.JobRecord) error {
	inputs := c.names.InputsBucket()
	byBucket := map[string][]string{}
	if rec.Spec != nil {
		if b, name, err := expand.ParseObjectRef(rec.Spec.Input); err == nil && b == inputs {
			byBucket[inputs] = append(byBucket[inputs], name)
		}
	}
	if rd := rec.Status.Reduce; rd != nil && rec.Spec != nil {
		bucket := c.names.ReduceBucket(cmp.Or(rec.Spec.Pool, messages.DefaultPool))
		for g := 0; g <= rd.Generation; g++ {
			byBucket[bucket] = append(byBucket[bucket], "reduce/"+rec.Status.ID+"/"+strconv.Itoa(g)+"/map-results.json")
		}
	}
	for bucket, names := range byBucket {
		obs, err := c.js.ObjectStore(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("object store %s: %w", bucket, err)
		}
		for _, name := range names {
			if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("deleting %s/%s: %w", bucket, name, err)
			}
			meta := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
			if err := c.streams.Purge(ctx, "OBJ_"+bucket, meta); err != nil {
				return err
			}
		}
	}
	return nil
}

// pruneJob deletes an expired job's record, after its cleanup, with its
// events and its submission. It reports whether the record is gone.
func (c *Retention) pruneJob(ctx context.Context, id string, olderThan time.Duration) (bool, error) {
	rec, rev, err := c.jobs.Get(ctx, id)
	if errors.Is(err, ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !c.expired(&rec.Status, c.clock.Now(), olderThan) {
		return false, nil
	}
	if rec.Status.State != messages.StateRejected {
		if rec.Status.CleanedAt == nil {
			if ok, err := c.cleanupJob(ctx, id, true); err != nil || !ok {
				return false, err
			}
			if rec, rev, err = c.jobs.Get(ctx, id); err != nil {
				return false, err
			}
		} else if err := c.purgeJobData(ctx, rec); err != nil {
			// Again: an item that outlived the late-result window (a step
			// running for hours) reports after the cleanup.
			return false, err
		}
	}
	if err := c.streams.Purge(ctx, c.names.EventsStream(), c.names.EventSubject(id, ">")); err != nil {
		return false, err
	}
	if seq := rec.SubmitSeq; seq > 0 {
		s, err := c.streams.Stream(ctx, c.names.JobsStream())
		if err == nil {
			err = s.DeleteMsg(ctx, seq)
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("deleting submission %d: %w", seq, err)
		}
	}
	if err := c.jobs.RemoveSpecs(ctx, rec); err != nil {
		return false, err
	}
	return c.jobs.Remove(ctx, id, rev, c.cfg.PruneMarkerTTL)
}

func kvStreamName(bucket string) string { return "KV_" + bucket }

func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }
