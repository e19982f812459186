// Package lease elects one leader among processes sharing a KV key: the
// holder rewrites the key every renew interval with a compare-and-set on
// its revision; a contender that sees the same revision for a whole TTL
// (by its own clock) takes the key with a compare-and-set on that
// revision. No clocks are compared across processes, and no server-side
// expiry is needed: the key's revision is the heartbeat.
//
// Fencing: a holder that cannot renew steps down (its leadership context
// ends) once TTL less one renew interval has passed since it sent its last
// successful renewal. A contender starts counting the TTL only when it
// first sees that renewal, which is after it was sent, so the holder has
// stopped at least one renew interval before anyone can take the key. A
// holder whose renewal is refused because someone else wrote the key
// steps down at once; one refused because an earlier renewal, whose reply
// was lost, was stored after all (the key holds this holder's value at a
// newer revision) goes on from that revision.
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrLost is the cause (context.Cause) of a leadership context that ended
// because the lease was lost, rather than because Run's context ended: a
// component that sees it must not write what only the leader writes.
var ErrLost = errors.New("lease: lost")

// Defaults of Config.
const (
	// DefaultTTL is how long a lease outlives its holder's last renewal.
	DefaultTTL = 4 * time.Second
	// MinTTL bounds TTL from below: renewals must fit in it.
	MinTTL = 100 * time.Millisecond
)

// Store is the part of a jetstream.KeyValue a lease writes.
type Store interface {
	kvcas.Store
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// Reader reads the key's latest value and revision (data nil: no key, or a
// delete marker). kvleader.Reader reads from the stream leader, so a
// lagging replica cannot show an old revision for long.
type Reader interface {
	Get(ctx context.Context, key string) (data []byte, rev uint64, err error)
}

// Config configures a Lease.
type Config struct {
	Store  Store
	Reader Reader
	// Key is the lease's key in the bucket.
	Key string
	// Holder names this process in the key's value (host, pid, a unique
	// suffix); it must differ between processes.
	Holder string
	// TTL defaults to DefaultTTL; Renew to TTL/4.
	TTL   time.Duration
	Renew time.Duration
	Clock clock.Clock // defaults to the real clock
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// Value is what the key holds.
type Value struct {
	// V is the schema version (docs/contract.md §8).
	V      messages.Schema `json:"v"`
	Holder string          `json:"holder"`
	Since  time.Time       `json:"since"` // when this holder acquired it
	TTL    string          `json:"ttl"`
}

// Lease campaigns for and holds a KV lease. Build it with New and run it
// with Run. IsLeader and Holder are safe for concurrent use.
type Lease struct {
	cfg Config
	log zerolog.Logger

	mu     sync.Mutex
	leader bool
	holder string    // the holder last seen (or this one)
	lastOK time.Time // when the write that last succeeded was sent (while leading)
	// writeErr is the error of the last write of the key (a take or a
	// renewal) that failed for another reason than a conflict; nil once
	// one succeeds. A refusal for want of room is kept over the
	// unanswered writes that follow it (full).
	writeErr error
	full     natsconn.FullStore
	// stored is when a write of the key was last seen stored: this
	// process's, or another's (a revision that changed).
	stored time.Time
}

// Stored returns when a write of the lease key was last seen stored, by
// this process or another: the store had room then. Zero before any.
func (l *Lease) Stored() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stored
}

// WriteErr returns the error of the last write of the lease (a take or a
// renewal) that failed other than by losing a race, or nil when the last
// write succeeded: why no coordinator may lead (a full store, a cut-off
// server). A full store refuses the first write for want of room
// (natsconn.StoreFull) and then leaves the writes unanswered, as a
// cut-off server does: its stream leader steps down and no node without
// room stands for election. So once a write was refused for want of room,
// WriteErr keeps that refusal through the unanswered writes that follow,
// until a write succeeds or fails otherwise.
func (l *Lease) WriteErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeErr
}

func (l *Lease) wrote(err error) {
	if kvcas.IsConflict(err) {
		return
	}
	l.full.Observe(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	if full := l.full.Err(); full != nil {
		err = full // still full: the stream has had no leader since
	}
	l.writeErr = err
	if err == nil {
		l.stored = time.Now()
	}
}

// othersWrote forgets a refusal of this process's writes for want of
// room: another holder's write of the key was stored since, so the store
// has room again.
func (l *Lease) othersWrote() {
	l.full.Forget()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stored = time.Now()
	if natsconn.StoreFull(l.writeErr) {
		l.writeErr = nil
	}
}

// New validates cfg and returns a lease.
func New(cfg Config) (*Lease, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Renew == 0 {
		cfg.Renew = cfg.TTL / 4
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	var errs []error
	if cfg.Store == nil || cfg.Reader == nil {
		errs = append(errs, errors.New("lease: store and reader are required"))
	}
	if cfg.Key == "" || cfg.Holder == "" {
		errs = append(errs, errors.New("lease: key and holder are required"))
	}
	if cfg.TTL < MinTTL {
		errs = append(errs, fmt.Errorf("lease: ttl %s, at least %s", cfg.TTL, MinTTL))
	}
	if cfg.Renew <= 0 || 2*cfg.Renew > cfg.TTL {
		errs = append(errs, fmt.Errorf("lease: renew %s, want more than 0 and at most half the ttl %s", cfg.Renew, cfg.TTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Lease{cfg: cfg, log: cfg.Logger.With().Str("component", "lease").Str("holder", cfg.Holder).Logger()}, nil
}

// IsLeader reports whether this process holds the lease now.
func (l *Lease) IsLeader() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader
}

// Current reports whether this process holds the lease by its own clock:
// it leads, and its last successful write was sent less than TTL less one
// renew interval ago, the bound at which it steps down. A process that
// was paused past that (a stopped VM, docker pause) still says it leads
// until its next renewal attempt finds out; Current is false at once, so
// what only a leader may answer is not answered from its stale state.
func (l *Lease) Current() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader && l.cfg.Clock.Now().Sub(l.lastOK) < l.cfg.TTL-l.cfg.Renew
}

// renewed records when the write that last succeeded was sent.
func (l *Lease) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastOK = sent
}

// Holder is the holder last seen: this process when it leads.
func (l *Lease) Holder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder
}

func (l *Lease) set(leader bool, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leader, l.holder = leader, holder
}

// Run campaigns until ctx ends. Each time the lease is won it calls lead
// with a context that ends when the lease is lost (or ctx ends), and waits
// for lead to return before it campaigns again. On ctx's end it waits for
// lead, then deletes the key (at its revision) so that another process
// takes over at once.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context)) error {
	for ctx.Err() == nil {
		rev, since, err := l.campaign(ctx)
		if err != nil {
			return nil // ctx ended
		}
		l.hold(ctx, rev, since, lead)
	}
	return nil
}

// campaign returns once this process holds the key, at revision rev.
func (l *Lease) campaign(ctx context.Context) (rev uint64, since time.Time, err error) {
	t := time.NewTicker(l.cfg.Renew)
	defer t.Stop()
	var (
		seenRev uint64
		seenAt  time.Time
	)
	for {
		data, cur, err := l.read(ctx)
		switch {
		case err != nil:
			l.log.Debug().Err(err).Msg("reading the lease failed")
		case data == nil:
			// No holder (never one, or one that let go): take it.
			if rev, since, ok := l.take(ctx, cur, true); ok {
				return rev, since, nil
			}
		default:
			var v Value
			_ = json.Unmarshal(data, &v)
			l.set(false, v.Holder)
			now := l.cfg.Clock.Now()
			if cur != seenRev {
				if seenRev != 0 {
					l.othersWrote()
				}
				seenRev, seenAt = cur, now
			} else if now.Sub(seenAt) >= l.cfg.TTL {
				l.log.Info().Str("previous", v.Holder).Dur("silent", now.Sub(seenAt)).Msg("lease expired; taking it")
				if rev, since, ok := l.take(ctx, cur, false); ok {
					return rev, since, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

// take writes this holder's value at revision cur (a delete marker's
// revision when free: Create then).
func (l *Lease) take(ctx context.Context, cur uint64, free bool) (uint64, time.Time, bool) {
	now := l.cfg.Clock.Now()
	data := l.value(now)
	wctx, cancel := context.WithTimeout(ctx, l.cfg.Renew)
	defer cancel()
	var rev uint64
	var err error
	if free {
		rev, err = kvcas.Write(wctx, l.cfg.Store, l.cfg.Key, data, 0)
	} else {
		rev, err = kvcas.Write(wctx, l.cfg.Store, l.cfg.Key, data, cur)
	}
	l.wrote(err)
	if err != nil {
		if !kvcas.IsConflict(err) {
			l.log.Debug().Err(err).Msg("taking the lease failed")
		}
		return 0, time.Time{}, false
	}
	return rev, now, true
}

// renew rewrites the key at revision rev. When that is refused because an
// earlier renewal whose reply was lost was stored after all (the key holds
// exactly this holder's value, data, at a newer revision), it renews at
// that revision instead.
func (l *Lease) renew(ctx context.Context, rev uint64, data []byte) (uint64, error) {
	nrev, err := l.cfg.Store.Update(ctx, l.cfg.Key, data, rev)
	if !kvcas.IsConflict(err) {
		return nrev, err
	}
	cur, curRev, rerr := l.cfg.Reader.Get(ctx, l.cfg.Key)
	if rerr != nil || !bytes.Equal(cur, data) || curRev <= rev {
		return 0, err
	}
	return l.cfg.Store.Update(ctx, l.cfg.Key, data, curRev)
}

func (l *Lease) value(since time.Time) []byte {
	data, _ := json.Marshal(Value{Holder: l.cfg.Holder, Since: since, TTL: l.cfg.TTL.String()})
	return data
}

func (l *Lease) read(ctx context.Context) ([]byte, uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Renew)
	defer cancel()
	return l.cfg.Reader.Get(rctx, l.cfg.Key)
}

// hold runs lead while the lease is renewed. lastOK is when the write
// that last succeeded was sent: the holder steps down once TTL-Renew has
// passed since then without another success.
func (l *Lease) hold(ctx context.Context, rev uint64, since time.Time, lead func(context.Context)) {
	lastOK := since
	l.renewed(since)
	l.set(true, l.cfg.Holder)
	l.log.Info().Msg("lease acquired: leading")
	leadCtx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(ErrLost) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	stepDown := func(why string) {
		l.set(false, "")
		cancel()
		<-done
		l.log.Warn().Str("why", why).Msg("lease lost: stepped down")
	}
	data := l.value(since)
	t := time.NewTicker(l.cfg.Renew)
	defer t.Stop()
	leadDone := (<-chan struct{})(done)
	for {
		select {
		case <-ctx.Done():
			l.set(false, "")
			cancelCause(nil) // the leader stops: ctx's cause, not ErrLost
			<-done
			dctx, dcancel := context.WithTimeout(context.Background(), l.cfg.Renew)
			if err := l.cfg.Store.Delete(dctx, l.cfg.Key, jetstream.LastRevision(rev)); err != nil {
				l.log.Debug().Err(err).Msg("releasing the lease failed; it expires")
			}
			dcancel()
			l.log.Info().Msg("lease released")
			return
		case <-leadDone:
			// lead returned by itself: keep the lease until ctx ends
			// (a leader without work is still the leader).
			leadDone = nil
		case <-t.C:
		}
		sent := l.cfg.Clock.Now()
		left := l.cfg.TTL - l.cfg.Renew - sent.Sub(lastOK)
		if left <= 0 {
			stepDown("not renewed in time")
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, min(left, l.cfg.Renew))
		nrev, err := l.renew(wctx, rev, data)
		wcancel()
		l.wrote(err)
		switch {
		case err == nil:
			rev, lastOK = nrev, sent
			l.renewed(sent)
		case kvcas.IsConflict(err):
			stepDown("another holder wrote the lease")
			return
		case ctx.Err() != nil:
			// handled by the next loop
		default:
			l.log.Warn().Err(err).Msg("renewing the lease failed; retrying")
		}
	}
}
