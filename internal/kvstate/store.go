package kvstate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Defaults of [Config].
const (
	// DefaultOpTimeout bounds one KV request.
	DefaultOpTimeout = 2 * time.Second
	// Backoff after a conflict: jittered, doubling from ConflictBackoffMin
	// up to ConflictBackoffMax.
	ConflictBackoffMin = 500 * time.Microsecond
	ConflictBackoffMax = 32 * time.Millisecond
	// Backoff after a failed request (timeout, no responders, leader
	// election): jittered, doubling from ErrorBackoffMin to ErrorBackoffMax.
	ErrorBackoffMin = 10 * time.Millisecond
	ErrorBackoffMax = time.Second
)

// Errors of a Store.
var (
	// ErrClosed is returned once Close has been called.
	ErrClosed = errors.New("kvstate: closed")
	// ErrRounds is returned when Update has used Config.MaxRounds rounds.
	ErrRounds = errors.New("kvstate: no write succeeded in the allowed rounds")
)

// Config configures a [Store] of values of type T.
type Config[T any] struct {
	// KV is the bucket. Required.
	KV jetstream.KeyValue
	// JetStream, when set, sends reads to the bucket stream's leader
	// (recommended for replicated buckets); without it reads use KV.Get.
	JetStream jetstream.JetStream
	// Decode reads a stored value. Defaults to json.Unmarshal. An error
	// fails the Get or Update that read it (wrap a sentinel to recognise
	// it); a watched value that does not decode is skipped.
	Decode func(data []byte) (T, error)
	// Encode writes a value. Defaults to json.Marshal.
	Encode func(v T) ([]byte, error)
	// WrittenBy reports whether v carries the write of writer id (the id
	// passed to the decision of [Store.Update]). Required for Update.
	WrittenBy func(v T, id string) bool
	// Watch follows the bucket (one ordered consumer, started at the first
	// tracked key) so that tracked keys stay fresh without a read. With
	// Watch set and the watch not running, nothing is served from the
	// cache. Without Watch the cache holds what this Store read and wrote,
	// and other writers are seen only through conflicts: right for state
	// whose every use ends in a compare-and-set.
	Watch bool
	// Observe, when set, is called with every value of a tracked key that
	// replaces an older one (read, written or watched), in revision order,
	// under the Store's lock: it must be quick and must not call the Store.
	Observe func(key string, e Entry[T])
	// Bounds bound the Store's requests and Updates ([Bounded] for state
	// on a hot path).
	Bounds
	// MaxKeys bounds the tracked keys: past it the cache is emptied (0: no
	// bound; Forget keys that are done with).
	MaxKeys int
	// Logger receives debug lines about failed writes. Defaults to
	// zerolog.Nop().
	Logger zerolog.Logger
}

// Bounds bound a Store's KV traffic. The zero Bounds are the defaults:
// DefaultOpTimeout, the Conflict… and Error… backoffs, and an Update
// bounded by its context alone.
type Bounds struct {
	// OpTimeout bounds one KV request. Defaults to DefaultOpTimeout.
	OpTimeout time.Duration
	// UpdateTimeout bounds one Update, its conflicts and retried failures
	// included (0: its context alone).
	UpdateTimeout time.Duration
	// ConflictBackoff spaces the rounds after a conflict or a stale read;
	// ErrorBackoff after a failed request. Default to the Conflict… and
	// Error… constants, with equal jitter.
	ConflictBackoff, ErrorBackoff *retry.Policy
	// MaxRounds bounds the rounds of one Update (0: until its context
	// ends).
	MaxRounds int
}

// BoundedRounds bounds the rounds of an Update under [Bounded].
const BoundedRounds = 200

// Bounded are the bounds of state on a hot path, whose callers must hear
// back in bounded time whatever KV does (a circuit breaker, a limit): a
// request within op, an Update within update and BoundedRounds rounds,
// the rounds spaced from 1 ms doubling up to backoffMax, each delay
// jittered by ±50 %, after a conflict and a failed request alike.
func Bounded(op, update, backoffMax time.Duration) Bounds {
	b := retry.Exponential(time.Millisecond, backoffMax).WithJitter(messages.JitterProportional, 0.5)
	return Bounds{OpTimeout: op, UpdateTimeout: update, ConflictBackoff: b, ErrorBackoff: b, MaxRounds: BoundedRounds}
}

// Entry is a key's value at a revision.
type Entry[T any] struct {
	// Value is the decoded value; the zero T when the key does not exist.
	Value T
	// Revision is the revision of the value, or of the delete marker; 0
	// when the key never existed.
	Revision uint64
	// Exists is false for a key that never existed, was deleted or purged.
	Exists bool
}

// Change is the result of an [Store.Update].
type Change[T any] struct {
	// From is the value the decision was last applied to.
	From Entry[T]
	// To is the value written, or From when the decision wrote nothing.
	// When the write's reply was lost, To.Revision is that of the value in
	// which its id was found: the write is at or before it.
	To Entry[T]
	// Written is true when this Update stored To; Writer is then the id of
	// the write that did (an earlier round's, when its reply was lost).
	Written bool
	Writer  string
}

// Decide is the decision of an [Store.Update]: from the current entry, the
// next value and whether to write it. A value written must carry id, the
// write's id, so that [Config.WrittenBy] can find it. An error ends the
// Update with that error. Decide may be called once per round and must
// depend only on its arguments.
type Decide[T any] func(cur Entry[T], id string) (next T, write bool, err error)

// Stats counts a Store's KV requests since New.
type Stats struct {
	Reads     int64 // reads of a key
	Writes    int64 // write attempts (create and compare-and-set), failed ones included
	Conflicts int64 // compare-and-sets refused for a stale revision
	Errors    int64 // other failed requests
}

// Store is a cached, compare-and-set view of one bucket's keys as values of
// type T. It is safe for concurrent use; Close stops it.
type Store[T any] struct {
	cfg    Config[T]
	leader *kvleader.Reader
	id     string // prefix of this Store's write ids
	seq    atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	keys     map[string]*slot[T]
	doubts   map[string]map[string]uint64 // key -> ids of writes under way or in doubt -> revision found at (0: not yet)
	watching bool                         // the watch was started, or failed to
	watchOK  bool                         // the watch runs: cached values are fresh
	watcher  jetstream.KeyWatcher

	stats struct{ reads, writes, conflicts, errors atomic.Int64 }
}

// slot is what the Store knows of one tracked key.
type slot[T any] struct {
	e     Entry[T]
	seen  bool // e is a value read, written or watched
	fresh bool // and no write against it was refused since
}

// New returns a Store for cfg. It makes no request until used.
func New[T any](cfg Config[T]) (*Store[T], error) {
	if cfg.KV == nil {
		return nil, errors.New("kvstate: Config.KV is nil")
	}
	if cfg.OpTimeout < 0 || cfg.UpdateTimeout < 0 || cfg.MaxRounds < 0 || cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("kvstate: Config.OpTimeout (%v), UpdateTimeout (%v), MaxRounds (%d) and MaxKeys (%d) must not be negative",
			cfg.OpTimeout, cfg.UpdateTimeout, cfg.MaxRounds, cfg.MaxKeys)
	}
	if cfg.Decode == nil {
		cfg.Decode = func(data []byte) (T, error) {
			var v T
			err := json.Unmarshal(data, &v)
			return v, err
		}
	}
	if cfg.Encode == nil {
		cfg.Encode = func(v T) ([]byte, error) { return json.Marshal(v) }
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.ConflictBackoff == nil {
		cfg.ConflictBackoff = retry.Exponential(ConflictBackoffMin, ConflictBackoffMax).WithJitter(messages.JitterEqual, 0)
	}
	if cfg.ErrorBackoff == nil {
		cfg.ErrorBackoff = retry.Exponential(ErrorBackoffMin, ErrorBackoffMax).WithJitter(messages.JitterEqual, 0)
	}
	var idb [6]byte
	_, _ = rand.Read(idb[:])
	s := &Store[T]{cfg: cfg, id: base64.RawURLEncoding.EncodeToString(idb[:]), keys: map[string]*slot[T]{}, doubts: map[string]map[string]uint64{}}
	if cfg.JetStream != nil {
		r := kvleader.New(cfg.JetStream, cfg.KV.Bucket())
		s.leader = &r
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the watch and waits for it; an Update under way ends with
// ErrClosed. It is idempotent.
func (s *Store[T]) Close() {
	s.cancel()
	s.mu.Lock()
	w := s.watcher
	s.watcher = nil
	s.mu.Unlock()
	if w != nil {
		_ = w.Stop()
	}
	s.wg.Wait()
}

// Stats returns the Store's request counters.
func (s *Store[T]) Stats() Stats {
	return Stats{
		Reads: s.stats.reads.Load(), Writes: s.stats.writes.Load(),
		Conflicts: s.stats.conflicts.Load(), Errors: s.stats.errors.Load(),
	}
}

// Watching reports whether the watch runs.
func (s *Store[T]) Watching() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchOK && s.watcher != nil
}

// Cached returns the last value seen of a tracked key without a request:
// ok is false when there is none; fresh is false when it may be outdated
// (a write against it was refused, or, with Config.Watch, the watch does
// not run). It does not track key.
func (s *Store[T]) Cached(key string) (e Entry[T], fresh, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil || !sl.seen {
		return Entry[T]{}, false, false
	}
	return sl.e, sl.fresh && s.cacheUsable(), true
}

// Get returns key's value: the cached one when it is fresh, else a read.
// It tracks key.
func (s *Store[T]) Get(ctx context.Context, key string) (Entry[T], error) {
	if e, ok := s.fresh(key); ok {
		return e, nil
	}
	e, _, err := s.read(ctx, key)
	return e, err
}

// Read reads key's value (from the stream leader with Config.JetStream),
// whatever the cache holds, and caches it if key is tracked. It does not
// track key.
func (s *Store[T]) Read(ctx context.Context, key string) (Entry[T], error) {
	e, _, err := s.read(ctx, key)
	return e, err
}

// Create stores v under key unless the key exists (a delete marker does
// not count), and returns the stored entry and whether this call wrote it;
// an existing key is read and returned, with created false.
func (s *Store[T]) Create(ctx context.Context, key string, v T) (e Entry[T], created bool, err error) {
	rev, err := s.write(ctx, key, v, 0)
	switch {
	case err == nil:
		e = Entry[T]{Value: v, Revision: rev, Exists: true}
		s.observe(key, e)
		return e, true, nil
	case kvcas.IsConflict(err):
		s.stats.conflicts.Add(1)
		e, err = s.Read(ctx, key)
		return e, false, err
	}
	s.stats.errors.Add(1)
	return Entry[T]{}, false, fmt.Errorf("kvstate: create %s: %w", key, err)
}

// Update changes key by compare-and-set: it takes the key's current value
// (cached when fresh, else read), asks decide for the next one and, if
// decide wants it written, writes it at the current revision. A conflict,
// a stale read or a failed request starts another round after a backoff;
// a write whose reply was lost counts as this Update's own once a value
// carrying its id is seen (see the package documentation). It returns when
// a value is written or decide writes nothing, with decide's error, with
// an error retrying will not fix (a missing bucket, a value that does not
// decode), or when ctx ends, the Store closes, Config.UpdateTimeout passes
// or Config.MaxRounds rounds are used. It tracks key.
func (s *Store[T]) Update(ctx context.Context, key string, decide Decide[T]) (Change[T], error) {
	if s.cfg.WrittenBy == nil {
		return Change[T]{}, errors.New("kvstate: Update needs Config.WrittenBy")
	}
	var cancel context.CancelFunc
	if s.cfg.UpdateTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, s.cfg.UpdateTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()

	conflicts := retry.NewBackoff(s.cfg.ConflictBackoff, nil, nil)
	failures := retry.NewBackoff(s.cfg.ErrorBackoff, nil, nil)
	var (
		doubt   map[string]attempt[T] // writes under way or in doubt, by id
		lastErr error
	)
	defer func() { s.dropDoubts(key, doubt) }()
	for round := 0; ; round++ {
		if id, rev, ok := s.foundDoubt(key, doubt); ok {
			a := doubt[id]
			a.to.Revision = rev
			return Change[T]{From: a.from, To: a.to, Written: true, Writer: id}, nil
		}
		if s.ctx.Err() != nil {
			return Change[T]{}, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return Change[T]{}, errors.Join(err, lastErr)
		}
		if s.cfg.MaxRounds > 0 && round >= s.cfg.MaxRounds {
			return Change[T]{}, errors.Join(fmt.Errorf("%w (%d rounds, key %s)", ErrRounds, round, key), lastErr)
		}
		wait := failures
		cur, err := s.current(ctx, key)
		switch {
		case errors.Is(err, errStale):
			wait = conflicts
		case err != nil && permanent(err):
			return Change[T]{}, err
		case err != nil:
			lastErr = err
		default:
			if id, rev, ok := s.foundDoubt(key, doubt); ok { // seen by the read
				a := doubt[id]
				a.to.Revision = rev
				return Change[T]{From: a.from, To: a.to, Written: true, Writer: id}, nil
			}
			id := s.id + "." + strconv.FormatUint(s.seq.Add(1), 36)
			next, write, err := decide(cur, id)
			if err != nil || !write {
				return Change[T]{From: cur, To: cur}, err
			}
			if doubt == nil {
				doubt = map[string]attempt[T]{}
			}
			doubt[id] = attempt[T]{from: cur, to: Entry[T]{Value: next, Exists: true}}
			s.addDoubt(key, id) // before the write: the watch may see it before its reply
			rev, err := s.write(ctx, key, next, cur.Revision)
			switch {
			case err == nil:
				s.dropDoubt(key, id)
				delete(doubt, id)
				to := Entry[T]{Value: next, Revision: rev, Exists: true}
				s.observe(key, to)
				return Change[T]{From: cur, To: to, Written: true, Writer: id}, nil
			case kvcas.IsConflict(err):
				s.dropDoubt(key, id)
				delete(doubt, id)
				s.stats.conflicts.Add(1)
				s.invalidate(key, cur.Revision)
				wait, lastErr = conflicts, err
			case ctx.Err() != nil:
				continue // ended: reported at the top
			case permanent(err):
				s.stats.errors.Add(1)
				return Change[T]{}, fmt.Errorf("kvstate: write %s: %w", key, err)
			default:
				// In doubt: a value seen carrying id (read or watched) tells
				// it landed; its id stays registered until Update returns.
				s.stats.errors.Add(1)
				s.invalidate(key, cur.Revision)
				lastErr = err
				s.cfg.Logger.Debug().Err(err).Str("key", key).Msg("write in doubt; reading again")
				continue // read at once
			}
		}
		if err := wait.Wait(ctx); err != nil {
			continue // reported at the top
		}
	}
}

// Forget stops tracking key: its cached value is dropped and the next Get
// or Update reads it.
func (s *Store[T]) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// ForgetPrefix stops tracking every key that starts with prefix.
func (s *Store[T]) ForgetPrefix(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.keys {
		if strings.HasPrefix(k, prefix) {
			delete(s.keys, k)
		}
	}
}

// errStale is a read older than a revision already seen (a lagging
// replica): transient.
var errStale = errors.New("kvstate: stale read")

// codecError is a value that does not decode or encode: permanent.
type codecError struct{ err error }

func (e codecError) Error() string { return e.err.Error() }
func (e codecError) Unwrap() error { return e.err }

// permanent reports errors that retrying will not fix.
func permanent(err error) bool {
	var ce codecError
	return errors.As(err, &ce) || kvcas.IsPermanent(err)
}

// cacheUsable: cached values may be served (s.mu held).
func (s *Store[T]) cacheUsable() bool { return !s.cfg.Watch || s.watchOK }

// fresh tracks key and returns its cached value if it may be served.
func (s *Store[T]) fresh(key string) (Entry[T], bool) {
	s.startWatch()
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil {
		if s.cfg.MaxKeys > 0 && len(s.keys) >= s.cfg.MaxKeys {
			clear(s.keys)
		}
		sl = &slot[T]{}
		s.keys[key] = sl // from now on the watch keeps it fresh
	}
	return sl.e, sl.seen && sl.fresh && s.cacheUsable()
}

// current is key's value for a round of Update: fresh from the cache, or
// read; errStale when the read is older than a value already seen.
func (s *Store[T]) current(ctx context.Context, key string) (Entry[T], error) {
	if e, ok := s.fresh(key); ok {
		return e, nil
	}
	e, accepted, err := s.read(ctx, key)
	if err == nil && !accepted {
		return e, errStale
	}
	return e, err
}

// read reads key and offers the value to the cache; accepted reports that
// the cache took it (key tracked and the value not older).
func (s *Store[T]) read(ctx context.Context, key string) (e Entry[T], accepted bool, err error) {
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	s.stats.reads.Add(1)
	var (
		data []byte
		rev  uint64
	)
	if s.leader != nil {
		data, rev, err = s.leader.Get(octx, key)
	} else {
		var kve jetstream.KeyValueEntry
		switch kve, err = s.cfg.KV.Get(octx, key); {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			err = nil // absent or deleted: written with create
		case err == nil:
			data, rev = kve.Value(), kve.Revision()
			if data == nil {
				data = []byte{}
			}
		}
	}
	if err != nil {
		s.stats.errors.Add(1)
		return Entry[T]{}, false, fmt.Errorf("kvstate: read %s: %w", key, err)
	}
	e.Revision = rev
	if data != nil {
		if e.Value, err = s.cfg.Decode(data); err != nil {
			return Entry[T]{}, false, codecError{fmt.Errorf("kvstate: read %s: %w", key, err)}
		}
		e.Exists = true
	}
	return e, s.observe(key, e), nil
}

// write stores v under key at rev (0: create).
func (s *Store[T]) write(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	data, err := s.cfg.Encode(v)
	if err != nil {
		return 0, codecError{fmt.Errorf("kvstate: encode %s: %w", key, err)}
	}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	s.stats.writes.Add(1)
	return kvcas.Write(octx, s.cfg.KV, key, data, rev)
}

// addDoubt registers the write id to key as under way.
func (s *Store[T]) addDoubt(key, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.doubts[key]
	if ids == nil {
		ids = map[string]uint64{}
		s.doubts[key] = ids
	}
	ids[id] = 0
}

// dropDoubt forgets the write id to key.
func (s *Store[T]) dropDoubt(key, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(key, id)
}

func (s *Store[T]) dropLocked(key, id string) {
	if ids := s.doubts[key]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(s.doubts, key)
		}
	}
}

// attempt is a write of an Update: the value it was decided from and the
// value written.
type attempt[T any] struct{ from, to Entry[T] }

// dropDoubts forgets the write ids of an Update that returns.
func (s *Store[T]) dropDoubts(key string, ids map[string]attempt[T]) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		s.dropLocked(key, id)
	}
}

// foundDoubt returns one of ids whose write to key a value seen since
// carried, and the revision of that value.
func (s *Store[T]) foundDoubt(key string, ids map[string]attempt[T]) (id string, rev uint64, ok bool) {
	if len(ids) == 0 {
		return "", 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if rev := s.doubts[key][id]; rev != 0 {
			return id, rev, true
		}
	}
	return "", 0, false
}

// observe offers e as key's value: the cache takes it if key is tracked
// and e is not older than what it holds, and reports whether it did. Any
// write under way that e carries is marked found.
func (s *Store[T]) observe(key string, e Entry[T]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Exists {
		for id, at := range s.doubts[key] {
			if at == 0 && s.cfg.WrittenBy(e.Value, id) {
				s.doubts[key][id] = e.Revision
			}
		}
	}
	sl := s.keys[key]
	if sl == nil || sl.seen && (e.Revision < sl.e.Revision || e.Revision == sl.e.Revision && sl.fresh) {
		return false
	}
	newer := !sl.seen || e.Revision > sl.e.Revision
	sl.e, sl.fresh, sl.seen = e, true, true
	if newer && s.cfg.Observe != nil {
		s.cfg.Observe(key, e)
	}
	return true
}

// invalidate marks key's cached value stale after a write at rev failed.
func (s *Store[T]) invalidate(key string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.keys[key]; sl != nil && sl.e.Revision == rev {
		sl.fresh = false
	}
}

// startWatch starts the watch once, if Config.Watch asks for it.
func (s *Store[T]) startWatch() {
	if !s.cfg.Watch {
		return
	}
	s.mu.Lock()
	if s.watching || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.watching = true
	s.mu.Unlock()
	// Started before the first read: a write after that read is watched.
	w, err := s.cfg.KV.WatchAll(s.ctx, jetstream.UpdatesOnly())
	if err != nil {
		if s.ctx.Err() == nil {
			s.cfg.Logger.Warn().Err(err).Str("bucket", s.cfg.KV.Bucket()).Msg("watch not started; every decision reads KV")
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		_ = w.Stop()
		return
	}
	s.watcher, s.watchOK = w, true
	s.wg.Add(1)
	go s.follow(w.Updates())
}

// follow feeds the cache from the watch until Close.
func (s *Store[T]) follow(updates <-chan jetstream.KeyValueEntry) {
	defer s.wg.Done()
	kvwatch.Follow(s.ctx, updates, func(kve jetstream.KeyValueEntry) {
		e := Entry[T]{Revision: kve.Revision()}
		if kve.Operation() == jetstream.KeyValuePut {
			v, err := s.cfg.Decode(kve.Value())
			if err != nil {
				return
			}
			e.Value, e.Exists = v, true
		}
		s.observe(kve.Key(), e)
	})
}
