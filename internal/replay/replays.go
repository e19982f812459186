package replay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const (
	// DLQEventsJob is the job token of DLQ events that concern no single
	// job: fleet.events._dlq.dlq (the 80% warning) and
	// fleet.events._dlq.replay (replays without a job filter).
	DLQEventsJob = "_dlq"
	// replayEventEvery is how many entries a replay handles between two
	// progress events.
	replayEventEvery = 100
	// keptReplays bounds the finished replays dlq.replays remembers.
	keptReplays = 50
	// loadWait bounds how long a new replay waits for the records to load.
	loadWait = 10 * time.Second
)

// Jobs is what the replays need of the coordinator's jobs.
type Jobs interface {
	// Recheck lets a job whose hold a replay released complete now, if
	// it is done.
	Recheck(job string)
	// Event publishes an event of job (a job id, or DLQEventsJob).
	Event(job string, ev messages.EventPayload)
	// ForgetPools drops what the Replayer's routing looked up of jobs.
	ForgetPools(jobs []string)
}

// Config is what Replays are built of.
type Config struct {
	// JetStream and Names reach the control bucket's stream leader;
	// Control is the control bucket.
	JetStream jetstream.JetStream
	Names     messages.Names
	Control   jetstream.KeyValue
	// Replayer plans and replays entries (its ReopenFunc reopens jobs).
	Replayer *dlq.Replayer
	Metrics  *dlq.Metrics
	Jobs     Jobs
	Clock    clock.Clock
	Logger   zerolog.Logger
}

// Replays are the coordinator's DLQ replays. They are safe for
// concurrent use.
type Replays struct {
	js      jetstream.JetStream
	names   messages.Names
	control jetstream.KeyValue
	rep     *dlq.Replayer
	metrics *dlq.Metrics
	jobs    Jobs
	clock   clock.Clock
	log     zerolog.Logger

	book *replayBook // every replay's record (run.go)

	holdMu  sync.Mutex
	holds   map[string]int // jobs being replayed (hold.go)
	resumed []replayRecord // those HoldResumed held, for Run
}

// New returns the replays of cfg. They do not touch the server until
// called.
func New(cfg Config) *Replays {
	return &Replays{js: cfg.JetStream, names: cfg.Names, control: cfg.Control, rep: cfg.Replayer,
		metrics: cfg.Metrics, jobs: cfg.Jobs, clock: cfg.Clock, log: cfg.Logger,
		book: newReplayBook(), holds: map[string]int{}}
}

func (s *Replays) setResumed(recs []replayRecord) []replayRecord {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	old := s.resumed
	s.resumed = recs
	return old
}

// Keep follows the replay records until ctx ends; every coordinator
// keeps them, to answer dlq.replays.
func (s *Replays) Keep(ctx context.Context) { s.book.keep(ctx, s.control, s.log) }

// EventsJob is the job token of the events of a replay of f.
func EventsJob(f messages.DLQFilter) string {
	if f.JobID != "" {
		return f.JobID
	}
	return DLQEventsJob
}

// overlaps reports whether two replays may select the same entries.
func overlaps(a, b messages.DLQFilter) bool {
	return a.JobID == "" || b.JobID == "" || a.JobID == b.JobID
}

// Start counts what req selects and stores the replay's record; the
// leader runs it. An error is a *messages.APIError, or the Replayer's
// (a filter's problem, a read's).
func (s *Replays) Start(ctx context.Context, req messages.DLQReplayRequest) (messages.DLQReplayStatus, error) {
	if _, err := dlq.LimiterFor(req.Rate, nil); err != nil {
		return messages.DLQReplayStatus{}, &messages.APIError{Code: messages.CodeBadRequest, Field: "rate", Message: err.Error()}
	}
	wctx, cancel := context.WithTimeout(ctx, loadWait)
	err := s.book.wait(wctx)
	cancel()
	if err != nil {
		return messages.DLQReplayStatus{}, &messages.APIError{Code: messages.CodeInternal, Message: "the replays are still loading: " + err.Error()}
	}
	for _, other := range s.book.all() {
		if st := other.Status; st.State == messages.ReplayRunning && overlaps(st.Filter, req.DLQFilter) {
			return messages.DLQReplayStatus{}, &messages.APIError{Code: messages.CodeConflict, Field: "job_id",
				Message: fmt.Sprintf("replay %s (job %q) is running over the same entries; wait for it or cancel it (dlq.replay.cancel)", st.ReplayID, st.Filter.JobID)}
		}
	}
	plan, err := s.rep.Plan(ctx, req.DLQFilter)
	if err != nil {
		return messages.DLQReplayStatus{}, err
	}
	now := s.clock.Now()
	rec := replayRecord{
		Status: messages.DLQReplayStatus{
			ReplayID: "replay-" + strings.ToLower(nuid.Next()),
			State:    messages.ReplayRunning, Filter: req.DLQFilter, Rate: req.Rate,
			ResetAttempts: req.ResetAttempts, StartedAt: &now,
			Matched: plan.Matched, ByJob: plan.ByJob, ByErrorClass: plan.ByErrorClass, BySignature: plan.BySignature,
		},
		UpTo: plan.Bound,
	}
	rev, err := s.putReplay(ctx, rec, 0)
	if err != nil {
		return messages.DLQReplayStatus{}, &messages.APIError{Code: messages.CodeInternal, Message: "storing the replay: " + err.Error()}
	}
	s.book.see(rec.Status.ReplayID, rec, rev)
	s.log.Info().Str("replay_id", rec.Status.ReplayID).Str("job_id", req.JobID).Int64("matched", plan.Matched).Float64("rate", req.Rate).Msg("DLQ replay requested")
	return rec.Status, nil
}

// Cancel asks the leader to stop replay id, and returns its status as
// it stands; ErrNoReplay when there is none.
func (s *Replays) Cancel(ctx context.Context, id string) (messages.DLQReplayStatus, error) {
	rec, err := s.updateReplay(ctx, id, func(r *replayRecord) bool {
		if r.Status.State != messages.ReplayRunning || r.Cancel {
			return false
		}
		r.Cancel = true
		return true
	})
	return rec.Status, err
}

// Status reads replay id's status from the stream leader, so that its
// progress never goes back from one answer to the next, whichever
// coordinator answers; ErrNoReplay when there is none.
func (s *Replays) Status(ctx context.Context, id string) (messages.DLQReplayStatus, error) {
	rec, _, err := s.readReplay(ctx, id)
	return rec.Status, err
}

// List returns every replay's status as this coordinator's watch saw
// it last, newest first.
func (s *Replays) List() []messages.DLQReplayStatus {
	out := []messages.DLQReplayStatus{}
	for _, rec := range s.book.all() {
		out = append(out, rec.Status)
	}
	return out
}

// WaitEnded waits until replay id has ended or ctx ends, and returns its
// last status.
func (s *Replays) WaitEnded(ctx context.Context, id string) messages.DLQReplayStatus {
	return s.book.waitEnded(ctx, id)
}
