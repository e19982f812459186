package jobrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/replay"
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
	// job (internal/replay).
	DLQEventsJob = replay.DLQEventsJob
)

// dlqService serves the dlq.* endpoints and the monitor; the replays run
// in internal/replay.
type dlqService struct {
	c       *Coordinator
	insp    *dlq.Inspector
	rep     *dlq.Replayer
	metrics *dlq.Metrics

	poolsMu sync.Mutex
	pools   map[string]*poolsLoad // finished jobs' item pools, for replays (origin.go)
}

func newDLQService(c *Coordinator) *dlqService {
	pageBytes := int(c.nc.MaxPayload()) - 64<<10
	if pageBytes < 64<<10 {
		pageBytes = 64 << 10
	}
	s := &dlqService{c: c, pools: map[string]*poolsLoad{}}
	s.insp = dlq.NewInspector(c.js, c.names, dlq.WithPageBytes(pageBytes), dlq.WithNow(c.cfg.hooks.Clock.Now), dlq.WithScanLimit(DLQScanLimit))
	s.rep = dlq.NewReplayer(c.js, c.names, s.insp, dlq.WithReopen(c.reopenForReplay), dlq.WithRoute(c.routeReplay), dlq.WithLogger(c.log), dlq.WithSigner(c.signer()))
	s.metrics = dlq.NewMetrics(c.cfg.Registerer)
	return s
}

// startDLQ runs the DLQ monitor until ctx ends.
func (c *Coordinator) startDLQ(ctx context.Context) {
	mon := dlq.NewMonitor(c.js, c.names, c.dlq.metrics, dlq.MonitorConfig{
		Logger: c.log, Now: c.cfg.hooks.Clock.Now, CountSince: time.Now(),
		OnWarn: func(u dlq.Usage) {
			if u.Problem != "" {
				c.event(DLQEventsJob, messages.DLQPoolMissingEvent(u.DLQStreamState))
				return
			}
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
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.keepDLQSources(ctx, interval, mon)
	}()
}

// keepDLQSources keeps the DLQ stream's configuration, its pools'
// dead-letter streams as sources above all, while this coordinator leads:
// a coordinator of the previous release that starts meanwhile sets it its
// own way (provision.EnsureDLQ). One warning per run of failures. It also
// provisions again each pool the monitor finds without its dead-letter
// stream, so that the stream is made once the operator has made room for
// its quota (docs/dlq.md).
func (c *Coordinator) keepDLQSources(ctx context.Context, interval time.Duration, mon *dlq.Monitor) {
	failing := false
	tick := time.NewTicker(interval) // the DLQ monitor's pace (dlq.Monitor.Run)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := provision.EnsureDLQ(ctx, c.js, c.names, c.cfg.Provision.config())
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			c.log.Warn().Err(err).Msg("cannot keep the DLQ stream's sources (the pools' dead-letter streams); retrying every DLQ monitor interval")
			failing = true
		case err == nil:
			failing = false
		}
		for _, pool := range mon.MissingPools() {
			if err := c.pools.ensure(ctx, pool); err != nil && ctx.Err() == nil {
				c.log.Debug().Err(err).Str("pool", pool).Msg("the pool's dead-letter stream still cannot be made")
			}
		}
	}
}

func (c *Coordinator) dlqEndpoints() map[string]endpointFunc {
	return map[string]endpointFunc{
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
	st, err := c.replays.Start(ctx, req)
	var ae *messages.APIError
	switch {
	case errors.As(err, &ae):
		return nil, ae
	case err != nil:
		return nil, dlqError(err)
	}
	if req.Wait {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		st = c.replays.WaitEnded(wctx, st.ReplayID)
	}
	return messages.DLQReplayReply{DLQReplayStatus: st}, nil
}

func (c *Coordinator) apiDLQReplayCancel(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplayCancelRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.ReplayID == "" {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "replay_id", Message: "required"}
	}
	st, err := c.replays.Cancel(ctx, req.ReplayID)
	switch {
	case errors.Is(err, replay.ErrNoReplay):
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q", req.ReplayID)}
	case err != nil:
		return nil, apiErr(messages.CodeInternal, err.Error())
	case st.State != messages.ReplayRunning:
		return messages.DLQReplayReply{DLQReplayStatus: st}, nil
	}
	// The leader stops it: entries already started finish, and the reply
	// carries the exact count.
	wctx, cancel := context.WithTimeout(ctx, DefaultReplayWait)
	defer cancel()
	st = c.replays.WaitEnded(wctx, req.ReplayID)
	if st.State == messages.ReplayRunning {
		return nil, apiErr(messages.CodeInternal, "the replay did not stop in time; ask dlq.replays for its final count")
	}
	return messages.DLQReplayReply{DLQReplayStatus: st}, nil
}

func (c *Coordinator) apiDLQReplays(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplaysRequest
	if e := decodeRequest(data, &req); e != nil {
		return nil, e
	}
	if req.ReplayID != "" {
		// One replay (what fleetctl dlq replay polls): read from the
		// stream leader, so its progress never goes back from one answer
		// to the next, whichever coordinator answers.
		st, err := c.replays.Status(ctx, req.ReplayID)
		switch {
		case errors.Is(err, replay.ErrNoReplay):
			return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q", req.ReplayID)}
		case err != nil:
			return nil, apiErr(messages.CodeInternal, err.Error())
		}
		return messages.DLQReplaysReply{Replays: []messages.DLQReplayStatus{st}}, nil
	}
	return messages.DLQReplaysReply{Replays: c.replays.List()}, nil
}
