package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Defaults of the Replayer.
const (
	// DefaultReplayConcurrency is how many entries are replayed at once.
	DefaultReplayConcurrency = 32
	// MaxHistory bounds the attempts a replayed item carries (the agent's
	// agent.MaxHistory): the newest are kept.
	MaxHistory = 100
	// replayTries bounds the tries of each step of an entry's replay
	// (a full work stream, a timeout) before the entry counts as failed.
	replayTries = 6
	// replayOpTimeout bounds one publish or delete.
	replayOpTimeout = 10 * time.Second
)

// replayBackoff spaces the tries of a replay step: 100ms doubling to 2s.
var replayBackoff = retry.Exponential(100*time.Millisecond, 2*time.Second)

// ErrNotReplayable is wrapped by errors that retrying cannot fix (the
// entry's job no longer exists): the entry counts as failed at once.
var ErrNotReplayable = errors.New("dlq: entry not replayable")

// ReplayAgent is the agent name on reopen markers.
const ReplayAgent = "dlq-replay"

// ReopenMsgID is the de-duplication id of the reopen marker a replay
// writes to the results stream before it republishes generation gen of an
// item: a resumed replay writes the same marker again, and it is dropped.
func ReopenMsgID(job, itemID string, gen int) string {
	return "reopen/" + wire.WorkMsgID(job, itemID, gen)
}

// ReopenFunc is called after the reopen marker of generation gen of e's
// item is stored (at stream sequence markerSeq of the results stream) and
// before the item is republished. The coordinator uses it to make sure the
// job is tracked again and has taken the marker in, so that it cannot
// finish without the replayed item's outcome. The function bounds its own
// waiting; an error wrapping ErrNotReplayable fails the entry, any other
// error is retried.
type ReopenFunc func(ctx context.Context, e *messages.DLQEntry, gen int, markerSeq uint64) error

// Replayer republishes dead-lettered items to their work subjects. For each
// entry it writes the reopen marker to the results stream (PubAck awaited),
// calls the ReopenFunc, publishes the item as generation+1 with msg id
// <job>/<item>/<generation> (PubAck awaited), and only then deletes the
// entry. Every step is idempotent, so a replay interrupted anywhere and run
// again replays each entry once. Safe for concurrent use.
type Replayer struct {
	js          jetstream.JetStream
	names       messages.Names
	insp        *Inspector
	reopen      ReopenFunc
	route       RouteFunc
	sign        SignFunc
	concurrency int
	clock       clock.Clock
	log         zerolog.Logger
}

// RouteFunc returns the pool a replay republishes e's item to: the pool
// its job routes the item to. origin is who wrote the entry (the pool on
// its subject, or messages.CoordinatorOrigin). An error wrapping
// ErrNotReplayable fails the entry without retries: the coordinator's
// refuses an entry an agent wrote for an item its pool was never given.
type RouteFunc func(ctx context.Context, e *messages.DLQEntry, origin string) (pool string, err error)

// ReplayerOption configures a Replayer.
type ReplayerOption func(*Replayer)

// WithReopen sets the function called between an entry's marker and its
// republish (see ReopenFunc).
func WithReopen(fn ReopenFunc) ReplayerOption { return func(r *Replayer) { r.reopen = fn } }

// WithRoute sets the function that picks the pool an entry's item is
// republished to (see RouteFunc). Without it the item goes back to the
// entry's pool: the pool on its subject, or the pool a coordinator-written
// entry names.
func WithRoute(fn RouteFunc) ReplayerOption { return func(r *Replayer) { r.route = fn } }

// SignFunc signs a replayed work item for the pool it is sent to (sets
// its Sig): the coordinator's, when it signs work items.
type SignFunc func(pool string, wi *wire.WorkItem) error

// WithSigner signs every replayed item with fn (nil: items are not signed).
func WithSigner(fn SignFunc) ReplayerOption { return func(r *Replayer) { r.sign = fn } }

// WithConcurrency sets how many entries are replayed at once (default
// DefaultReplayConcurrency). Pacing applies to their start.
func WithConcurrency(n int) ReplayerOption {
	return func(r *Replayer) {
		if n > 0 {
			r.concurrency = n
		}
	}
}

// WithClock sets the clock of retry backoffs and marker times.
func WithClock(c clock.Clock) ReplayerOption { return func(r *Replayer) { r.clock = c } }

// WithLogger sets the replayer's logger (default zerolog.Nop()).
func WithLogger(l zerolog.Logger) ReplayerOption {
	return func(r *Replayer) { r.log = l.With().Str("component", "dlq_replay").Logger() }
}

// NewReplayer returns a replayer; insp scans the entries.
func NewReplayer(js jetstream.JetStream, names messages.Names, insp *Inspector, opts ...ReplayerOption) *Replayer {
	r := &Replayer{js: js, names: names, insp: insp, concurrency: DefaultReplayConcurrency, clock: clock.Real{}, log: zerolog.Nop()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Plan is what a replay with a filter would do (a dry run). Bound is the
// last DLQ sequence it looked at: pass it as ReplayOptions.UpTo to replay
// exactly what was counted, minus entries removed meanwhile.
type Plan struct {
	Group
	Skipped int64
	Bound   uint64
}

// Plan counts the entries f selects, grouped by job, error class and
// signature. Entries that cannot be replayed (poison messages) are counted
// in Skipped, not in Matched. It changes nothing.
func (r *Replayer) Plan(ctx context.Context, f messages.DLQFilter) (*Plan, error) {
	return r.PlanUpTo(ctx, f, 0)
}

// PlanUpTo is Plan over the entries up to DLQ sequence upTo (0: all): what
// is left of a replay planned with Bound upTo (a resumed replay).
func (r *Replayer) PlanUpTo(ctx context.Context, f messages.DLQFilter, upTo uint64) (*Plan, error) {
	if err := ValidateFilter(f); err != nil {
		return nil, err
	}
	p := &Plan{Group: *newGroup()}
	bound, err := r.insp.scan(ctx, NewMatcher(f), upTo, func(s *scanned) bool {
		if why := notReplayable(&s.ref.Entry); why != "" {
			p.Skipped++
		} else {
			p.add(&s.ref.Entry)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	p.Bound = bound
	return p, nil
}

// ReplayOptions is one replay.
type ReplayOptions struct {
	Filter messages.DLQFilter
	// UpTo bounds the scan at this DLQ sequence (0 = the last entry when the
	// replay starts); Plan.Bound.
	UpTo uint64
	// ResetAttempts gives replayed items all of their attempts again;
	// without it a replayed item's failed step counts on from its history
	// (WorkItem.ResetAttempts).
	ResetAttempts bool
	// Limiter paces the entries; nil = unpaced.
	Limiter Limiter
	// OnProgress is called after each entry, one call at a time.
	OnProgress func(Progress)
}

// Progress counts a replay's entries so far.
type Progress struct {
	// Replayed entries were republished (PubAck) and then deleted.
	Replayed int64
	// Failed entries stay in the DLQ; LastError says why the last one failed.
	Failed int64
	// Skipped entries are not replayable, or were removed by someone else
	// (another replay, a purge) while this one ran.
	Skipped   int64
	LastError string
}

// Replay replays the entries opts.Filter selects, in stream order, until
// they are done or ctx ends. Cancelling ctx stops starting new entries;
// entries already started are finished, so the returned counts are exact.
// The error is ctx's when cancelled, or what stopped the scan.
func (r *Replayer) Replay(ctx context.Context, opts ReplayOptions) (Progress, error) {
	var prog Progress
	if err := ValidateFilter(opts.Filter); err != nil {
		return prog, err
	}
	dlqStream, err := r.js.Stream(ctx, r.names.DLQStream())
	if err != nil {
		return prog, fmt.Errorf("dlq: stream %s: %w", r.names.DLQStream(), err)
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		pending = make(chan *scanned)
	)
	// Entries started run to their end even if ctx is cancelled meanwhile.
	bg := context.WithoutCancel(ctx)
	for range r.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range pending {
				outcome, err := r.replayOne(bg, dlqStream, s, opts.ResetAttempts)
				mu.Lock()
				switch outcome {
				case outcomeReplayed:
					prog.Replayed++
				case outcomeSkipped:
					prog.Skipped++
				case outcomeFailed:
					prog.Failed++
				}
				if err != nil {
					prog.LastError = fmt.Sprintf("%s/%s: %v", s.ref.Entry.JobID, s.ref.Entry.ItemID, err)
					r.log.Warn().Err(err).Str("job_id", s.ref.Entry.JobID).Str("item_id", s.ref.Entry.ItemID).
						Uint64("stream_seq", s.ref.Seq).Msg("entry not replayed")
				}
				if opts.OnProgress != nil {
					opts.OnProgress(prog)
				}
				mu.Unlock()
			}
		}()
	}
	_, scanErr := r.insp.scan(ctx, NewMatcher(opts.Filter), opts.UpTo, func(s *scanned) bool {
		if opts.Limiter != nil {
			if err := opts.Limiter.Wait(ctx); err != nil {
				return false
			}
		}
		select {
		case pending <- s:
			return true
		case <-ctx.Done():
			return false
		}
	})
	close(pending)
	wg.Wait()
	if ctx.Err() != nil {
		return prog, ctx.Err()
	}
	return prog, scanErr
}

type replayOutcome int

const (
	outcomeReplayed replayOutcome = iota
	outcomeSkipped
	outcomeFailed
)

// notReplayable says why an entry cannot be replayed, or "".
func notReplayable(e *messages.DLQEntry) string {
	switch {
	case e.Reason == messages.ReasonPoison || e.Reason == ReasonUndecodable:
		return "a poison message has no work item to republish"
	case messages.ValidToken(e.JobID) != nil || e.ItemID == "":
		return "the entry names no valid job and item"
	case e.PayloadTruncated:
		return "the entry's payload was truncated to fit the server's max_payload"
	}
	return ""
}

// replayOne replays one entry (see Replayer).
func (r *Replayer) replayOne(ctx context.Context, dlqStream jetstream.Stream, s *scanned, reset bool) (replayOutcome, error) {
	ref := &s.ref
	e := &ref.Entry
	if why := notReplayable(e); why != "" {
		return outcomeSkipped, nil
	}
	gen := e.Generation + 1
	var pool string
	err := r.retry(ctx, func() error {
		var err error
		pool, err = r.poolOf(ctx, e, ref.Origin)
		return err
	})
	if err != nil {
		return outcomeFailed, fmt.Errorf("routing: %w", err)
	}
	var markerSeq uint64
	err = r.try(ctx, func(ctx context.Context) error {
		ack, err := r.publish(ctx, r.names.ResultSubject(messages.CoordinatorOrigin, e.JobID), r.names.ResultsStream(), ReopenMsgID(e.JobID, e.ItemID, gen), r.marker(e, gen))
		if err == nil {
			markerSeq = ack.Sequence
		}
		return err
	})
	if err != nil {
		return outcomeFailed, fmt.Errorf("reopen marker: %w", err)
	}
	if r.reopen != nil {
		if err := r.retry(ctx, func() error { return r.reopen(ctx, e, gen, markerSeq) }); err != nil {
			return outcomeFailed, fmt.Errorf("reopening the job: %w", err)
		}
	}
	wi := workItem(e, gen, reset)
	if r.sign != nil {
		if err := r.sign(pool, wi); err != nil {
			return outcomeFailed, fmt.Errorf("republish: %w", err)
		}
	}
	err = r.try(ctx, func(ctx context.Context) error {
		_, err := r.publish(ctx, r.names.WorkSubject(pool, e.JobID), r.names.WorkStream(), wire.WorkMsgID(e.JobID, e.ItemID, gen), wi)
		return err
	})
	if err != nil {
		return outcomeFailed, fmt.Errorf("republish: %w", err)
	}
	gone := false
	err = r.try(ctx, func(ctx context.Context) error {
		var err error
		gone, err = r.insp.deleteEntry(ctx, dlqStream, s)
		return err
	})
	switch {
	case err != nil:
		return outcomeFailed, fmt.Errorf("republished, but deleting the entry failed (a new replay finishes it without a duplicate): %w", err)
	case gone:
		return outcomeSkipped, nil // another replay or a purge took it
	}
	return outcomeReplayed, nil
}

// try runs op with a timeout, retrying failures other than ErrNotReplayable
// with backoff.
func (r *Replayer) try(ctx context.Context, op func(context.Context) error) error {
	return r.retry(ctx, func() error {
		octx, cancel := context.WithTimeout(ctx, replayOpTimeout)
		defer cancel()
		return op(octx)
	})
}

// retry runs op until it succeeds, fails with ErrNotReplayable, or has
// failed replayTries times, with backoff in between.
func (r *Replayer) retry(ctx context.Context, op func() error) error {
	b := retry.NewBackoff(replayBackoff, nil, r.clock)
	for {
		err := op()
		if err == nil || errors.Is(err, ErrNotReplayable) || b.Retries() == replayTries-1 {
			return err
		}
		if b.Wait(ctx) != nil {
			return err
		}
	}
}

func (r *Replayer) publish(ctx context.Context, subject, stream, msgID string, body any) (*jetstream.PubAck, error) {
	var data []byte
	var err error
	if wi, ok := body.(*wire.WorkItem); ok {
		// A replayed item carries its history: the oldest attempts give way
		// so that the message fits the server's max_payload.
		data, err = wire.EncodeWorkItem(wi, int(r.js.Conn().MaxPayload())-headerRoom)
	} else {
		data, err = json.Marshal(body)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrNotReplayable, err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	return r.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(stream))
}

// marker is the reopen marker of generation gen of e's item.
func (r *Replayer) marker(e *messages.DLQEntry, gen int) *messages.Result {
	// No Reason: budget denials, like retries, stay counted as what happened.
	return &messages.Result{
		JobID: e.JobID, ItemID: e.ItemID, Index: e.Index, Group: e.Group,
		Outcome: messages.OutcomeReopened, Generation: gen,
		ErrorClass: e.ErrorClass, Signature: e.Signature,
		Agent: ReplayAgent, FinishedAt: r.clock.Now(),
	}
}

// poolOf is the pool e's item is republished to: the RouteFunc's answer,
// or else the entry's own pool (never the work subject the body claims).
// A pool without a work consumer fails the entry: its item would wait in
// the work stream with no agent to take it, and the replay would say it
// succeeded.
func (r *Replayer) poolOf(ctx context.Context, e *messages.DLQEntry, origin string) (string, error) {
	pool, err := r.routeOf(ctx, e, origin)
	if err != nil {
		return "", err
	}
	name := r.names.AgentsConsumer(pool)
	if _, err := r.js.Consumer(ctx, r.names.WorkStream(), name); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return "", fmt.Errorf("%w: pool %q has no work consumer (%s), so no agent would take the item: start an agent of the pool (or list it in the coordinator's --pools), then replay again",
			ErrNotReplayable, pool, name)
	} else if err != nil {
		return "", fmt.Errorf("pool %q: %w", pool, err)
	}
	return pool, nil
}

// routeOf picks poolOf's pool.
func (r *Replayer) routeOf(ctx context.Context, e *messages.DLQEntry, origin string) (string, error) {
	if r.route != nil {
		return r.route(ctx, e, origin)
	}
	pool := e.Pool
	if origin != "" && origin != messages.CoordinatorOrigin {
		pool = origin
	}
	if messages.ValidPool(pool) != nil {
		pool = messages.DefaultPool
	}
	return pool, nil
}

// workItem rebuilds e's work item as generation gen: same job, item,
// payload and correlation id; the history so far travels with it.
func workItem(e *messages.DLQEntry, gen int, reset bool) *wire.WorkItem {
	hist, dropped := e.Attempts, e.AttemptsDropped
	if len(hist) > MaxHistory {
		dropped += len(hist) - MaxHistory
		hist = hist[len(hist)-MaxHistory:]
	}
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return &wire.WorkItem{
		JobID: e.JobID, ItemID: e.ItemID, Index: e.Index, Group: e.Group, Payload: payload,
		Generation: gen, CorrelationID: e.CorrelationID, ReplayCount: e.ReplayCount + 1,
		History: hist, HistoryDropped: dropped, ResetAttempts: reset,
	}
}
