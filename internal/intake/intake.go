package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/keylock"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Consumer is the durable consumer of the jobs stream.
const Consumer = "coordinator"

// Jobs is the face of the coordinator's jobs the intake takes
// (internal/jobrun gives it).
type Jobs interface {
	// Accept turns the durable submission data, at stream sequence seq,
	// into a job, or records it rejected; it waits for its turn through
	// g. An error means "try again later".
	Accept(ctx context.Context, data []byte, seq uint64, g Gate) error
	// Reject records the submission at seq rejected with problems.
	Reject(ctx context.Context, seq uint64, data []byte, problems []messages.FieldError) error
	// LeaveNewer leaves a submission of a newer schema for a coordinator
	// of that release, and reports whether it did.
	LeaveNewer(m jetstream.Msg) bool
	// Unfinished is the number of jobs pending or running.
	Unfinished() int
}

// Config is what an Intake takes submissions from and hands them to.
type Config struct {
	JetStream jetstream.JetStream
	Conn      *nats.Conn
	Names     messages.Names
	Jobs      Jobs
	// AckWait is the intake consumer's: how long a submission stays with
	// a coordinator that stopped answering for it (heartbeats keep a long
	// acceptance alive).
	AckWait time.Duration
	// MaxDeliveries is how often a submission is tried before it is
	// rejected; MaxOpenJobs bounds the jobs open or being accepted.
	MaxDeliveries int
	MaxOpenJobs   int
	Clock         clock.Clock
	Tracer        tracing.Tracer
	Logger        zerolog.Logger
}

// Intake takes in the durable submissions while its coordinator leads
// (Run), and counts the open jobs. Safe for concurrent use.
type Intake struct {
	cfg   Config
	log   zerolog.Logger
	slots openSlots
	// errs remembers why durable submissions failed (one).
	errs errorsSeen
}

// New returns the intake of cfg; it asks the server nothing until Run.
func New(cfg Config) *Intake { return &Intake{cfg: cfg, log: cfg.Logger} }

// Holds reports whether the intake has submissions it has not
// acknowledged: every submission stored before the call is either taken
// in or counted here (false when the state cannot be read).
//
// The consumer's pending count alone would miss one: the server answers a
// publish once the message is stored and tells the stream's consumers a
// moment later, so a submission whose submit was just answered can be
// stored and not yet pending. The stream's last sequence, read first,
// covers it: a consumer that has not yet delivered that far holds it.
func (in *Intake) Holds(ctx context.Context) bool {
	stream, err := in.cfg.JetStream.Stream(ctx, in.cfg.Names.JobsStream())
	if err != nil {
		return false
	}
	last := stream.CachedInfo().State.LastSeq
	cons, err := stream.Consumer(ctx, Consumer)
	if err != nil {
		return false
	}
	info := cons.CachedInfo()
	return info.NumPending > 0 || info.NumAckPending > 0 || info.Delivered.Stream < last
}

// The intake takes in every submission it pulls, within readAhead
// bytes (each counted as at least minWeight), so that a slow
// submission (a large input to count) or a burst of bad ones holds back
// no other: those refused for what they are (a bad spec, a pool they may
// not use) are written by at most maxRefusals at a time, leaving the
// server's time to the good ones, and at most maxWorkers are accepted
// at once. The pulls ahead hold at most readAhead bytes too.
const (
	maxWorkers  = 64
	maxRefusals = 16
	readAhead   = 64 << 20
	minWeight   = 16 << 10
)

// Run consumes the durable jobs stream, up to maxWorkers submissions at a
// time, until ctx (the leader's term) ends; submissions that name the
// same job id are accepted one after the other (a keylock.Map). It returns an
// error when the connection is lost.
func (in *Intake) Run(ctx context.Context) error {
	cons, err := in.cfg.JetStream.CreateOrUpdateConsumer(ctx, in.cfg.Names.JobsStream(), jetstream.ConsumerConfig{
		Durable:     Consumer,
		Description: "jetfleet coordinator intake",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     in.cfg.AckWait,
	})
	if err != nil {
		return fmt.Errorf("coordinator: intake consumer: %w", err)
	}
	// Pulled by bytes: submissions may be as large as MaxSpecBytes.
	it, err := cons.Messages(jetstream.PullMaxBytes(readAhead), jetstream.PullExpiry(natsconn.PullExpiry), jetstream.PullHeartbeat(natsconn.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("coordinator: intake: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var wg sync.WaitGroup
	defer wg.Wait()
	var locks keylock.Map
	refusals := make(chan struct{}, maxRefusals)
	held := semaphore.NewWeighted(readAhead)
	accepting := make(chan struct{}, maxWorkers)
	for {
		m, err := it.Next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case in.cfg.Conn.IsClosed():
				return fmt.Errorf("coordinator: intake: %w", natsconn.Lost(in.cfg.Conn))
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return nil
			}
			in.log.Warn().Err(err).Msg("intake pull failed")
			continue
		}
		// The submissions being taken in hold at most readAhead
		// bytes between them, each at least minWeight (a larger
		// one, that much alone).
		size := min(max(int64(len(m.Data())), minWeight), readAhead)
		if err := held.Acquire(ctx, size); err != nil {
			return nil // shutting down: unacknowledged, it comes back
		}
		wg.Add(1)
		t := in.slots.ticket()
		go func() {
			defer wg.Done()
			defer held.Release(size)
			defer in.slots.drop(t) // let the next in, whatever happened
			in.one(ctx, m, t, &locks, refusals, accepting)
		}()
	}
}

// key is the job id a durable submission names, or its stream
// sequence when it names none: submissions with the same key are accepted
// one at a time.
func key(m jetstream.Msg) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(m.Data(), &probe) == nil && probe.ID != "" {
		return probe.ID
	}
	if md, err := m.Metadata(); err == nil {
		return "#" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return ""
}

// one accepts one durable submission, or rejects it. A submission
// that fails to be accepted MaxDeliveries times — an error each
// time, or a coordinator that died while accepting it (out of memory, a
// crash), which would otherwise repeat after every restart — is recorded
// as rejected with the reason, and never tried again.
//
// A submission refused for what it is (a bad spec, a pool it may not use)
// is refused at once, with no open slot, among at most maxRefusals
// refusals written at a time; any other waits for its turn (Gate):
// t is its place in the intake's queue (openSlots.ticket), and
// submissions that name the same job id (locks) are accepted one at a
// time.
func (in *Intake) one(ctx context.Context, m jetstream.Msg, t uint64, locks *keylock.Map, refusals, accepting chan struct{}) {
	if in.cfg.Jobs.LeaveNewer(m) {
		return
	}
	// The span of the submission's acceptance, a child of its submitter's.
	ctx, span := in.cfg.Tracer.Start(tracing.Extract(ctx, m.Headers()), tracing.SpanAccept, trace.SpanKindConsumer)
	defer span.End()
	var seq, delivered uint64 = 0, 1
	if md, err := m.Metadata(); err == nil {
		seq, delivered = md.Sequence.Stream, md.NumDelivered
		clock.Observe(in.cfg.Clock, md.Timestamp)
	}
	stop := inProgress(m, in.cfg.AckWait/3)
	defer stop()
	maxTries := uint64(in.cfg.MaxDeliveries)
	g := Gate{refusals: refusals, enter: func() (func(), error) {
		release, err := in.waitOpenSlot(ctx, t)
		if err != nil {
			return nil, err
		}
		select {
		case accepting <- struct{}{}:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
		unlock := locks.Lock(key(m))
		return func() { unlock(); <-accepting; release() }, nil
	}}
	if delivered <= maxTries {
		err := in.safeAccept(ctx, m.Data(), seq, g)
		if err == nil {
			in.errs.forget(seq)
			_ = m.Ack()
			return
		}
		if ctx.Err() != nil {
			return // shutting down: the next coordinator tries again
		}
		in.errs.set(seq, err)
		in.log.Error().Err(err).Uint64("stream_seq", seq).Uint64("num_delivered", delivered).Msg("accepting job failed")
		if delivered < maxTries {
			_ = m.NakWithDelay(backoff.Delay(int(delivered), 0, nil))
			return
		}
	}
	why := "the coordinator stopped or died while accepting it (out of memory?)"
	if last := in.errs.get(seq); last != "" {
		why = last
	}
	tries := min(delivered, maxTries)
	problems := []messages.FieldError{{Message: fmt.Sprintf("not accepted after %d attempts: %s", tries, why)}}
	if err := in.cfg.Jobs.Reject(ctx, seq, m.Data(), problems); err != nil {
		in.log.Error().Err(err).Uint64("stream_seq", seq).Msg("recording the rejection failed; will retry")
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	in.errs.forget(seq)
	_ = m.Ack()
}

// backoff spaces the deliveries of a submission that failed to be
// accepted: 2s doubling to a minute.
var backoff = retry.Exponential(2*time.Second, time.Minute)

// safeAccept is Jobs.Accept; a panic there (a bug some spec found) counts as a
// failed attempt, so the submission ends rejected with the reason.
func (in *Intake) safeAccept(ctx context.Context, data []byte, seq uint64, g Gate) (err error) {
	defer func() {
		if p := recover(); p != nil {
			in.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Uint64("stream_seq", seq).Msg("accepting a job panicked")
			err = fmt.Errorf("internal error: %v", p)
		}
	}()
	return in.cfg.Jobs.Accept(ctx, data, seq, g)
}

// Gate is how a durable submission's acceptance waits: Enter waits for
// its turn (an open slot, and its job id's), Refuse bounds the
// rejections written at once. The zero gate waits for nothing.
type Gate struct {
	enter    func() (leave func(), err error)
	refusals chan struct{}
}

// Enter waits for the submission's turn; leave ends it.
func (g Gate) Enter() (leave func(), err error) {
	if g.enter == nil {
		return func() {}, nil
	}
	return g.enter()
}

// Refuse writes a rejection among the gate's refusals.
func (g Gate) Refuse(ctx context.Context, reject func() error) error {
	if g.refusals != nil {
		select {
		case g.refusals <- struct{}{}:
			defer func() { <-g.refusals }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reject()
}

// inProgress tells the server every interval that m is still being worked
// on, until the returned func is called.
func inProgress(m jetstream.Msg, every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// errorsSeen remembers why recent submissions failed, for the reason of
// their rejection. Safe for concurrent use.
type errorsSeen struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (e *errorsSeen) set(seq uint64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) > 1000 {
		e.m = map[uint64]string{}
	}
	e.m[seq] = err.Error()
}

func (e *errorsSeen) get(seq uint64) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[seq]
}

func (e *errorsSeen) forget(seq uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, seq)
}
