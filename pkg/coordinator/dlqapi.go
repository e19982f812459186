package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/pkg/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DLQ API defaults.
const (
	// DefaultDLQMonitorInterval is how often the DLQ stream's depth, bytes
	// and oldest entry are read for the metrics and the 80% warning.
	DefaultDLQMonitorInterval = 15 * time.Second
	// DefaultDLQPageSize is dlq.list's page size when the request sets no limit.
	DefaultDLQPageSize = 100
	// DLQScanLimit bounds the DLQ entries one dlq.list request examines,
	// matching or not: a rare filter gets a short page and a next_seq to
	// go on from instead of a scan of the whole DLQ.
	DLQScanLimit = 10_000
	// DefaultReplayWait and MaxReplayWait bound a dlq.replay request with
	// "wait": true.
	DefaultReplayWait = 30 * time.Second
	MaxReplayWait     = 10 * time.Minute
	// DLQEventsJob is the job token of DLQ events that concern no single
	// job: fleet.events._dlq.dlq (the 80% warning) and
	// fleet.events._dlq.replay (replays without a job filter).
	DLQEventsJob = "_dlq"
	// replayEventEvery is how many entries a replay handles between two
	// progress events.
	replayEventEvery = 100
	// keptReplays bounds the finished replays dlq.replays remembers.
	keptReplays = 50
)

// dlqService serves the dlq.* endpoints and runs replays and the monitor.
type dlqService struct {
	c       *Coordinator
	insp    *dlq.Inspector
	rep     *dlq.Replayer
	metrics *dlq.Metrics

	mu      sync.Mutex
	replays map[string]*replayRun
	order   []string // oldest first

	holdMu sync.Mutex
	holds  map[string]int // jobs being replayed (replay.go)

	poolsMu sync.Mutex
	pools   map[string]*poolsLoad // finished jobs' item pools, for replays (origin.go)
}

// replayRun is one replay running (or run) on this coordinator.
type replayRun struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	status    messages.DLQReplayStatus
	cancelled bool // by an API call (not a coordinator shutdown)
	reported  int64
	inGauge   bool // counted in replays_in_progress
}

func (run *replayRun) snapshot() messages.DLQReplayStatus {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.status
}

func newDLQService(c *Coordinator) *dlqService {
	pageBytes := int(c.nc.MaxPayload()) - 64<<10
	if pageBytes < 64<<10 {
		pageBytes = 64 << 10
	}
	s := &dlqService{c: c, replays: map[string]*replayRun{}, holds: map[string]int{}, pools: map[string]*poolsLoad{}}
	s.insp = dlq.NewInspector(c.js, c.names, dlq.WithPageBytes(pageBytes), dlq.WithNow(c.cfg.Clock.Now), dlq.WithScanLimit(DLQScanLimit))
	s.rep = dlq.NewReplayer(c.js, c.names, s.insp, dlq.WithReopen(c.reopenForReplay), dlq.WithRoute(c.routeReplay), dlq.WithLogger(c.log))
	s.metrics = dlq.NewMetrics(c.cfg.Registerer)
	return s
}

// startDLQ runs the DLQ monitor until ctx ends.
func (c *Coordinator) startDLQ(ctx context.Context) {
	mon := dlq.NewMonitor(c.js, c.names, c.dlq.metrics, dlq.MonitorConfig{
		Logger: c.log, Now: c.cfg.Clock.Now, CountSince: time.Now(),
		OnWarn: func(u dlq.Usage) {
			c.event(DLQEventsJob, messages.DLQNearlyFullEvent(u.DLQStreamState))
		},
	})
	interval := c.cfg.DLQMonitorInterval
	if interval <= 0 {
		interval = DefaultDLQMonitorInterval
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := mon.Run(ctx, interval); err != nil && ctx.Err() == nil {
			c.log.Error().Err(err).Msg("DLQ monitor stopped")
		}
	}()
}

func (c *Coordinator) dlqEndpoints() map[string]func(context.Context, []byte) (any, *messages.APIError) {
	return map[string]func(context.Context, []byte) (any, *messages.APIError){
		messages.EndpointDLQList:         c.apiDLQList,
		messages.EndpointDLQGet:          c.apiDLQGet,
		messages.EndpointDLQStats:        c.apiDLQStats,
		messages.EndpointDLQReplay:       c.apiDLQReplay,
		messages.EndpointDLQReplayCancel: c.apiDLQReplayCancel,
		messages.EndpointDLQReplays:      c.apiDLQReplays,
		messages.EndpointDLQPurge:        c.apiDLQPurge,
	}
}

// dlqError maps an inspector error to an API error.
func dlqError(err error) *messages.APIError {
	var fe *dlq.FilterError
	switch {
	case errors.As(err, &fe):
		return &messages.APIError{Code: messages.CodeBadRequest, Field: fe.Field, Message: fe.Message}
	case errors.Is(err, dlq.ErrEntryNotFound):
		return &messages.APIError{Code: messages.CodeNotFound, Field: "seq", Message: err.Error()}
	}
	return apiErr(messages.CodeInternal, err.Error())
}

func (c *Coordinator) apiDLQList(ctx context.Context, data []byte) (any, *messages.APIError) {
	var f messages.DLQFilter
	if e := decodeRequest(data, &f); e != nil {
		return nil, e
	}
	if f.Limit == 0 {
		f.Limit = DefaultDLQPageSize
	}
	page, err := c.dlq.insp.List(ctx, f)
	if err != nil {
		return nil, dlqError(err)
	}
	return messages.DLQListReply{Entries: page.Entries, More: page.More, NextSeq: page.NextSeq, Scanned: page.Examined}, nil
}

func (c *Coordinator) apiDLQGet(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQGetRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.Seq == 0 {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "seq", Message: "required: the entry's DLQ stream sequence (dlq.list shows it)"}
	}
	ref, err := c.dlq.insp.Get(ctx, req.Seq)
	if err != nil {
		return nil, dlqError(err)
	}
	return messages.DLQGetReply{Entry: ref}, nil
}

func (c *Coordinator) apiDLQStats(ctx context.Context, data []byte) (any, *messages.APIError) {
	var f messages.DLQFilter
	if e := decodeRequest(data, &f); e != nil {
		return nil, e
	}
	st, err := c.dlq.insp.Stats(ctx, f)
	if err != nil {
		return nil, dlqError(err)
	}
	return st, nil
}

func (c *Coordinator) apiDLQPurge(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQPurgeRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if !req.Confirm {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "confirm",
			Message: "must be true: a purge deletes the matching entries for good (fleetctl dlq purge --yes)"}
	}
	n, err := c.dlq.insp.Purge(ctx, req.DLQFilter)
	if err != nil {
		return nil, dlqError(err)
	}
	c.log.Warn().Int64("purged", n).Str("job_id", req.JobID).Msg("DLQ entries purged")
	return messages.DLQPurgeReply{Purged: n}, nil
}

func (c *Coordinator) apiDLQReplay(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplayRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.Rate < 0 || req.Rate > dlq.MaxRate {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "rate", Message: fmt.Sprintf("%v, want 0 (unpaced) to %v items/s", req.Rate, dlq.MaxRate)}
	}
	wait := req.WaitTimeout.D()
	if wait == 0 {
		wait = DefaultReplayWait
	}
	if wait > MaxReplayWait {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "wait_timeout", Message: fmt.Sprintf("%s, at most %s", req.WaitTimeout, MaxReplayWait)}
	}
	if err := dlq.ValidateFilter(req.DLQFilter); err != nil {
		return nil, dlqError(err)
	}
	if req.DryRun {
		plan, err := c.dlq.rep.Plan(ctx, req.DLQFilter)
		if err != nil {
			return nil, dlqError(err)
		}
		return messages.DLQReplayReply{DLQReplayStatus: messages.DLQReplayStatus{
			DryRun: true, Matched: plan.Matched, Skipped: plan.Skipped,
			ByJob: plan.ByJob, ByErrorClass: plan.ByErrorClass, BySignature: plan.BySignature,
			Filter: req.DLQFilter, Rate: req.Rate, ResetAttempts: req.ResetAttempts,
		}}, nil
	}
	run, apiErr := c.dlq.start(ctx, req)
	if apiErr != nil {
		return nil, apiErr
	}
	if req.Wait {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-run.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return messages.DLQReplayReply{DLQReplayStatus: run.snapshot()}, nil
}

func (c *Coordinator) apiDLQReplayCancel(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplayCancelRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.ReplayID == "" {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "replay_id", Message: "required"}
	}
	c.dlq.mu.Lock()
	run := c.dlq.replays[req.ReplayID]
	c.dlq.mu.Unlock()
	if run == nil {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q on this coordinator", req.ReplayID)}
	}
	run.mu.Lock()
	if run.status.State == messages.ReplayRunning {
		run.cancelled = true
	}
	run.mu.Unlock()
	run.cancel()
	// Entries already started finish; the reply carries the exact count.
	select {
	case <-run.done:
	case <-ctx.Done():
		return nil, apiErr(messages.CodeInternal, "the replay did not stop in time; ask dlq.replays for its final count")
	}
	return messages.DLQReplayReply{DLQReplayStatus: run.snapshot()}, nil
}

func (c *Coordinator) apiDLQReplays(_ context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplaysRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	c.dlq.mu.Lock()
	runs := make([]*replayRun, 0, len(c.dlq.order))
	for i := len(c.dlq.order) - 1; i >= 0; i-- {
		if id := c.dlq.order[i]; req.ReplayID == "" || id == req.ReplayID {
			runs = append(runs, c.dlq.replays[id])
		}
	}
	c.dlq.mu.Unlock()
	if req.ReplayID != "" && len(runs) == 0 {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q on this coordinator", req.ReplayID)}
	}
	reply := messages.DLQReplaysReply{Replays: make([]messages.DLQReplayStatus, 0, len(runs))}
	for _, run := range runs {
		reply.Replays = append(reply.Replays, run.snapshot())
	}
	return reply, nil
}

// overlaps reports whether two replays may select the same entries.
func overlaps(a, b messages.DLQFilter) bool {
	return a.JobID == "" || b.JobID == "" || a.JobID == b.JobID
}

// start counts what req selects and starts replaying it in the background.
func (s *dlqService) start(ctx context.Context, req messages.DLQReplayRequest) (*replayRun, *messages.APIError) {
	c := s.c
	limiter, err := dlq.LimiterFor(req.Rate, nil)
	if err != nil {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "rate", Message: err.Error()}
	}
	c.mu.Lock()
	runCtx := c.runCtx
	c.mu.Unlock()
	if runCtx == nil || runCtx.Err() != nil {
		return nil, apiErr(messages.CodeInternal, "the coordinator is stopping")
	}
	s.mu.Lock()
	for _, id := range s.order {
		other := s.replays[id]
		if st := other.snapshot(); st.State == messages.ReplayRunning && overlaps(st.Filter, req.DLQFilter) {
			s.mu.Unlock()
			return nil, &messages.APIError{Code: messages.CodeConflict, Field: "job_id",
				Message: fmt.Sprintf("replay %s (job %q) is running over the same entries; wait for it or cancel it (dlq.replay.cancel)", id, st.Filter.JobID)}
		}
	}
	// Reserve the slot before counting so two requests cannot both start.
	now := c.cfg.Clock.Now()
	rctx, cancel := context.WithCancel(runCtx)
	run := &replayRun{
		id: "replay-" + strings.ToLower(nuid.Next()), cancel: cancel, done: make(chan struct{}),
		status: messages.DLQReplayStatus{
			State: messages.ReplayRunning, Filter: req.DLQFilter, Rate: req.Rate,
			ResetAttempts: req.ResetAttempts, StartedAt: &now,
		},
	}
	run.status.ReplayID = run.id
	s.replays[run.id] = run
	s.order = append(s.order, run.id)
	s.forgetOldLocked()
	s.mu.Unlock()

	plan, err := s.rep.Plan(ctx, req.DLQFilter)
	if err != nil {
		s.finish(run, dlq.Progress{LastError: err.Error()}, err)
		return nil, dlqError(err)
	}
	run.mu.Lock()
	run.status.Matched, run.status.ByJob = plan.Matched, plan.ByJob
	run.status.ByErrorClass, run.status.BySignature = plan.ByErrorClass, plan.BySignature
	run.inGauge = true
	run.mu.Unlock()
	s.metrics.ReplaysInProgress.Inc()
	c.log.Info().Str("replay_id", run.id).Str("job_id", req.JobID).Int64("matched", plan.Matched).Float64("rate", req.Rate).Msg("DLQ replay started")
	c.event(replayEventsJob(req.DLQFilter), messages.DLQReplayStartedEvent(run.snapshot()))

	jobs := make([]string, 0, len(plan.ByJob))
	for j := range plan.ByJob {
		jobs = append(jobs, j)
	}
	s.holdJobs(jobs)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		prog, err := s.rep.Replay(rctx, dlq.ReplayOptions{
			Filter: req.DLQFilter, UpTo: plan.Bound, ResetAttempts: req.ResetAttempts, Limiter: limiter,
			OnProgress: func(p dlq.Progress) { s.progress(run, p) },
		})
		s.releaseJobs(jobs)
		s.forgetPools(jobs)
		s.finish(run, prog, err)
	}()
	return run, nil
}

// progress records a replay's counts, with a progress event every
// replayEventEvery entries.
func (s *dlqService) progress(run *replayRun, p dlq.Progress) {
	run.mu.Lock()
	if d := p.Replayed - run.status.Replayed; d > 0 {
		s.metrics.Replayed.Add(float64(d))
	}
	run.status.Replayed, run.status.Failed, run.status.Skipped = p.Replayed, p.Failed, p.Skipped
	if p.LastError != "" {
		run.status.LastError = p.LastError
	}
	handled := p.Replayed + p.Failed + p.Skipped
	emit := handled-run.reported >= replayEventEvery
	if emit {
		run.reported = handled
	}
	st := run.status
	run.mu.Unlock()
	if emit {
		s.c.event(replayEventsJob(st.Filter), messages.DLQReplayProgressEvent(st))
	}
}

// finish records a replay's end and publishes its last event.
func (s *dlqService) finish(run *replayRun, p dlq.Progress, err error) {
	s.progress(run, p)
	now := s.c.cfg.Clock.Now()
	run.mu.Lock()
	switch {
	case err == nil:
		run.status.State = messages.ReplayCompleted
	case errors.Is(err, context.Canceled):
		run.status.State = messages.ReplayCancelled
		if !run.cancelled {
			run.status.LastError = "the coordinator stopped; run the replay again to finish it"
		}
	default:
		run.status.State = messages.ReplayFailed
		run.status.LastError = err.Error()
	}
	run.status.FinishedAt = &now
	st, inGauge := run.status, run.inGauge
	run.mu.Unlock()
	run.cancel()
	if inGauge {
		s.metrics.ReplaysInProgress.Dec()
	}
	s.c.log.Info().Str("replay_id", run.id).Str("state", st.State).Int64("replayed", st.Replayed).
		Int64("failed", st.Failed).Int64("skipped", st.Skipped).Msg("DLQ replay ended")
	s.c.event(replayEventsJob(st.Filter), messages.DLQReplayFinishedEvent(st))
	close(run.done)
}

// forgetOldLocked drops the oldest finished replays beyond keptReplays.
func (s *dlqService) forgetOldLocked() {
	if len(s.order) <= keptReplays {
		return
	}
	keep := s.order[:0]
	excess := len(s.order) - keptReplays
	for _, id := range s.order {
		run := s.replays[id]
		if excess > 0 && run.snapshot().State != messages.ReplayRunning {
			delete(s.replays, id)
			excess--
			continue
		}
		keep = append(keep, id)
	}
	s.order = keep
}

// replayEventsJob is the job token of a replay's events.
func replayEventsJob(f messages.DLQFilter) string {
	if f.JobID != "" {
		return f.JobID
	}
	return DLQEventsJob
}
