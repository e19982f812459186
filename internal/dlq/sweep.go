package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultSweepMinAge is how long a work message must have been seen
// stranded before the sweeper dead-letters it: room for the MAX_DELIVERIES
// advisory, which normally comes within the consumer's AckWait.
const DefaultSweepMinAge = 5 * time.Minute

// Sweeper dead-letters work messages stranded at MaxDeliver whose
// MAX_DELIVERIES advisory was lost: the advisory is a fire-and-forget core
// NATS message (docs/jetstream.md §5), emitted while, say, the advisories
// stream had no leader, and the message then stays in the work stream,
// never delivered again (§4).
//
// A message is stranded, provably, when it is still in the stream although
// its pool's consumer delivered it and holds nothing of it: in a WorkQueue
// stream an acked or terminated message is deleted at once, and a message
// being worked on, or parked by a NakWithDelay however long, is pending
// (NumAckPending). The consumer's info lists no pending sequences, so the
// proof is one of two: the message is at or below the consumer's ack
// floor (everything there is acked or given up), or the consumer has
// nothing pending at all and delivered the message (its sequence is at or
// below Delivered). Measured on nats-server 2.15.2: giving up on a message
// does not move the ack floor; it moves past it when the messages before
// it are acked, or jumps when nothing is pending. A stranded message of a
// pool that is never idle therefore waits until the floor passes it: the
// sweep errs on the side of leaving a message where it is.
//
// To be sure a reading is not transient, a message is moved only when two
// passes at least minAge apart have both found it stranded (it was then
// stored at least minAge ago), leaving the advisory time to come. It is
// moved by the Mover (Move), like an advisory's: the DLQ entry is
// de-duplicated by its message id and a message already gone is skipped,
// so a late advisory, a second sweeper or a second coordinator doubles
// nothing.
//
// Safe for concurrent use; Run one per coordinator (any number per fleet).
type Sweeper struct {
	mover  *Mover
	minAge time.Duration
	now    func() time.Time

	mu   sync.Mutex
	seen map[uint64]time.Time // stranded message → when a pass first found it
}

// SweeperOption configures a Sweeper.
type SweeperOption func(*Sweeper) error

// WithSweepMinAge sets how long a message must stay stranded (and have
// been stored) before it is moved. Defaults to DefaultSweepMinAge.
func WithSweepMinAge(d time.Duration) SweeperOption {
	return func(s *Sweeper) error {
		if d <= 0 {
			return fmt.Errorf("dlq: sweep min age: %s, want > 0", d)
		}
		s.minAge = d
		return nil
	}
}

// WithSweepClock sets the clock the ages are read from (tests).
func WithSweepClock(now func() time.Time) SweeperOption {
	return func(s *Sweeper) error {
		if now == nil {
			return errors.New("dlq: sweep clock: nil")
		}
		s.now = now
		return nil
	}
}

// NewSweeper returns a sweeper that moves what it finds with mover.
func NewSweeper(mover *Mover, opts ...SweeperOption) (*Sweeper, error) {
	s := &Sweeper{mover: mover, minAge: DefaultSweepMinAge, now: time.Now, seen: map[uint64]time.Time{}}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run sweeps every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.mover.log.Warn().Err(err).Msg("sweep for stranded work messages failed; trying again next interval")
		} else if n > 0 {
			s.mover.log.Warn().Int("moved", n).Msg("stranded work messages dead-lettered (their MAX_DELIVERIES advisories were lost)")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass looks at every pool's consumer once and moves the messages found
// stranded on two passes at least minAge apart. It returns how many it
// moved.
func (s *Sweeper) Pass(ctx context.Context) (int, error) {
	m := s.mover
	stream, err := m.js.Stream(ctx, m.names.WorkStream())
	if err != nil {
		return 0, err
	}
	now := s.now()
	stranded := map[uint64]uint64{} // seq → the consumer's MaxDeliver
	var errs []error
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if !strings.HasPrefix(ci.Name, m.names.AgentsConsumer("")) || ci.Config.MaxDeliver < 1 {
			continue
		}
		if err := s.strandedOf(ctx, stream, ci, stranded); err != nil {
			errs = append(errs, fmt.Errorf("consumer %s: %w", ci.Name, err))
		}
	}
	if err := lister.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...) // keep what was seen: a pass that failed proves nothing
	}
	s.mu.Lock()
	var due []uint64
	for seq, first := range s.seen {
		if _, still := stranded[seq]; !still {
			delete(s.seen, seq) // moved, or taken care of meanwhile
			continue
		}
		if now.Sub(first) >= s.minAge {
			due = append(due, seq)
		}
	}
	for seq := range stranded {
		if _, ok := s.seen[seq]; !ok {
			s.seen[seq] = now
		}
	}
	s.mu.Unlock()
	moved := 0
	for _, seq := range due {
		if err := m.Move(ctx, seq, stranded[seq]); err != nil {
			errs = append(errs, fmt.Errorf("moving %d: %w", seq, err))
			continue
		}
		moved++
		s.mu.Lock()
		delete(s.seen, seq)
		s.mu.Unlock()
	}
	return moved, errors.Join(errs...)
}

// strandedOf adds to out the messages of ci's pool that are provably
// stranded: still stored, and at or below its ack floor, or delivered
// while nothing is pending.
func (s *Sweeper) strandedOf(ctx context.Context, stream jetstream.Stream, ci *jetstream.ConsumerInfo, out map[uint64]uint64) error {
	upTo := ci.AckFloor.Stream
	if ci.NumAckPending == 0 {
		upTo = max(upTo, ci.Delivered.Stream)
	}
	subject := ci.Config.FilterSubject
	if upTo == 0 || subject == "" {
		return nil
	}
	for seq := uint64(1); seq <= upTo; {
		raw, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw.Sequence > upTo {
			return nil
		}
		out[raw.Sequence] = uint64(ci.Config.MaxDeliver)
		seq = raw.Sequence + 1
	}
	return nil
}
