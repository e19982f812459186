package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/replay"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The dlq.* endpoints' bounds.
const (
	// DefaultDLQPageSize is dlq.list's page size when the request sets no limit.
	DefaultDLQPageSize = 100
	// DefaultReplayWait and MaxReplayWait bound a dlq.replay request with
	// "wait": true.
	DefaultReplayWait = 30 * time.Second
	MaxReplayWait     = 10 * time.Minute
)

// DLQ is what the dlq.* endpoints read and start: the dead letters'
// inspector, the replayer that plans a dry run, and the durable replays.
type DLQ struct {
	Inspector *dlq.Inspector
	Replayer  *dlq.Replayer
	Replays   *replay.Replays
}

// dlqAPI answers the dlq.* endpoints.
type dlqAPI struct {
	insp    *dlq.Inspector
	rep     *dlq.Replayer
	replays *replay.Replays
	log     zerolog.Logger
}

func (a dlqAPI) endpoints() map[string]endpoint.Func {
	return map[string]endpoint.Func{
		messages.EndpointDLQList:         a.apiDLQList,
		messages.EndpointDLQGet:          a.apiDLQGet,
		messages.EndpointDLQStats:        a.apiDLQStats,
		messages.EndpointDLQReplay:       a.apiDLQReplay,
		messages.EndpointDLQReplayCancel: a.apiDLQReplayCancel,
		messages.EndpointDLQReplays:      a.apiDLQReplays,
		messages.EndpointDLQPurge:        a.apiDLQPurge,
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
	return endpoint.Err(messages.CodeInternal, err.Error())
}

func (a dlqAPI) apiDLQList(ctx context.Context, data []byte) (any, *messages.APIError) {
	var f messages.DLQFilter
	if e := endpoint.Decode(data, &f); e != nil {
		return nil, e
	}
	if f.Limit == 0 {
		f.Limit = DefaultDLQPageSize
	}
	page, err := a.insp.List(ctx, f)
	if err != nil {
		return nil, dlqError(err)
	}
	return messages.DLQListReply{Entries: page.Entries, More: page.More, NextSeq: page.NextSeq, Scanned: page.Examined}, nil
}

func (a dlqAPI) apiDLQGet(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQGetRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if req.Seq == 0 {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "seq", Message: "required: the entry's DLQ stream sequence (dlq.list shows it)"}
	}
	ref, err := a.insp.Get(ctx, req.Seq)
	if err != nil {
		return nil, dlqError(err)
	}
	return messages.DLQGetReply{Entry: ref}, nil
}

func (a dlqAPI) apiDLQStats(ctx context.Context, data []byte) (any, *messages.APIError) {
	var f messages.DLQFilter
	if e := endpoint.Decode(data, &f); e != nil {
		return nil, e
	}
	st, err := a.insp.Stats(ctx, f)
	if err != nil {
		return nil, dlqError(err)
	}
	return st, nil
}

func (a dlqAPI) apiDLQPurge(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQPurgeRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if !req.Confirm {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "confirm",
			Message: "must be true: a purge deletes the matching entries for good (fleetctl dlq purge --yes)"}
	}
	n, err := a.insp.Purge(ctx, req.DLQFilter)
	if err != nil {
		return nil, dlqError(err)
	}
	a.log.Warn().Int64("purged", n).Str("job_id", req.JobID).Msg("DLQ entries purged")
	return messages.DLQPurgeReply{Purged: n}, nil
}

func (a dlqAPI) apiDLQReplay(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplayRequest
	if e := endpoint.Decode(data, &req); e != nil {
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
		plan, err := a.rep.Plan(ctx, req.DLQFilter)
		if err != nil {
			return nil, dlqError(err)
		}
		return messages.DLQReplayReply{DLQReplayStatus: messages.DLQReplayStatus{
			DryRun: true, Matched: plan.Matched, Skipped: plan.Skipped,
			ByJob: plan.ByJob, ByErrorClass: plan.ByErrorClass, BySignature: plan.BySignature,
			Filter: req.DLQFilter, Rate: req.Rate, ResetAttempts: req.ResetAttempts,
		}}, nil
	}
	st, err := a.replays.Start(ctx, req)
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
		st = a.replays.WaitEnded(wctx, st.ReplayID)
	}
	return messages.DLQReplayReply{DLQReplayStatus: st}, nil
}

func (a dlqAPI) apiDLQReplayCancel(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplayCancelRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if req.ReplayID == "" {
		return nil, &messages.APIError{Code: messages.CodeBadRequest, Field: "replay_id", Message: "required"}
	}
	st, err := a.replays.Cancel(ctx, req.ReplayID)
	switch {
	case errors.Is(err, replay.ErrNoReplay):
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q", req.ReplayID)}
	case err != nil:
		return nil, endpoint.Err(messages.CodeInternal, err.Error())
	case st.State != messages.ReplayRunning:
		return messages.DLQReplayReply{DLQReplayStatus: st}, nil
	}
	// The leader stops it: entries already started finish, and the reply
	// carries the exact count.
	wctx, cancel := context.WithTimeout(ctx, DefaultReplayWait)
	defer cancel()
	st = a.replays.WaitEnded(wctx, req.ReplayID)
	if st.State == messages.ReplayRunning {
		return nil, endpoint.Err(messages.CodeInternal, "the replay did not stop in time; ask dlq.replays for its final count")
	}
	return messages.DLQReplayReply{DLQReplayStatus: st}, nil
}

func (a dlqAPI) apiDLQReplays(ctx context.Context, data []byte) (any, *messages.APIError) {
	var req messages.DLQReplaysRequest
	if e := endpoint.Decode(data, &req); e != nil {
		return nil, e
	}
	if req.ReplayID != "" {
		// One replay (what fleetctl dlq replay polls): read from the
		// stream leader, so its progress never goes back from one answer
		// to the next, whichever coordinator answers.
		st, err := a.replays.Status(ctx, req.ReplayID)
		switch {
		case errors.Is(err, replay.ErrNoReplay):
			return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: fmt.Sprintf("no replay %q", req.ReplayID)}
		case err != nil:
			return nil, endpoint.Err(messages.CodeInternal, err.Error())
		}
		return messages.DLQReplaysReply{Replays: []messages.DLQReplayStatus{st}}, nil
	}
	return messages.DLQReplaysReply{Replays: a.replays.List()}, nil
}
