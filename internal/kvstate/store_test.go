package kvstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/kvstate"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, fleettest.IgnoreServerGoroutines())
}

// counter is the test's state: a count and the ids of its last writes.
type counter struct {
	N       int      `json:"n"`
	Writers []string `json:"writers,omitempty"`
}

func (c counter) add(id string) counter {
	c.N++
	c.Writers = append(slices.Clone(c.Writers[max(0, len(c.Writers)-15):]), id)
	return c
}

func writtenBy(c counter, id string) bool { return slices.Contains(c.Writers, id) }

func increment(cur kvstate.Entry[counter], id string) (counter, bool, error) {
	return cur.Value.add(id), true, nil
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newBucket(t testing.TB, js jetstream.JetStream, replicas int) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateOrUpdateKeyValue(testCtx(t, 30*time.Second),
		jetstream.KeyValueConfig{Bucket: "state", History: 1, Storage: jetstream.FileStorage, Replicas: replicas})
	require.NoError(t, err)
	return kv
}

func newStore(t testing.TB, cfg kvstate.Config[counter]) *kvstate.Store[counter] {
	t.Helper()
	if cfg.WrittenBy == nil {
		cfg.WrittenBy = writtenBy
	}
	s, err := kvstate.New(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// server is a fleettest.Server or Cluster: each simulated process gets its
// own connection.
type server interface {
	Connect(t testing.TB, opts ...nats.Option) *nats.Conn
}

// connect opens the "state" bucket on a new connection.
func connect(t *testing.T, srv server) (jetstream.JetStream, jetstream.KeyValue) {
	js, err := jetstream.New(srv.Connect(t))
	require.NoError(t, err)
	kv, err := js.KeyValue(testCtx(t, 10*time.Second), "state")
	require.NoError(t, err)
	return js, kv
}

// TestOneNode and TestThreeNodes run the same cases on an R1 and an R3
// bucket; on three nodes the stream leader also steps down during the
// concurrent updates.
func TestOneNode(t *testing.T) {
	srv := fleettest.RunServer(t)
	newBucket(t, srv.JS(), 1)
	runCases(t, srv, nil)
}

func TestThreeNodes(t *testing.T) {
	c := fleettest.RunCluster(t, 3)
	newBucket(t, c.JS(), 3)
	c.WaitForStreamLeader(t, "KV_state")
	runCases(t, c, func(ctx context.Context) error {
		_, err := c.StepDownStreamLeader(ctx, "KV_state")
		return err
	})
}

func runCases(t *testing.T, e server, midRun func(context.Context) error) {
	t.Run("concurrent updates count exactly", func(t *testing.T) { testConcurrent(t, e, midRun) })
	t.Run("a conflict decides again on the new value", func(t *testing.T) { testConflict(t, e) })
	t.Run("the watch keeps the cache fresh", func(t *testing.T) { testWatch(t, e) })
	t.Run("a lost reply is resolved by writer id", func(t *testing.T) { testLostReply(t, e) })
	t.Run("create, no write, errors", func(t *testing.T) { testCreateAndErrors(t, e) })
}

// testConcurrent: processes × workers increments of one key, each through
// its own Update, all through reads from the leader: the key counts every
// Update that reported a write, once.
func testConcurrent(t *testing.T, e server, midRun func(context.Context) error) {
	const processes, workers, each = 3, 4, 25
	ctx := testCtx(t, 90*time.Second)
	var written atomic.Int64
	third := make(chan struct{}) // closed when a third of the updates are done
	var once sync.Once
	var wg sync.WaitGroup
	errs := make(chan error, processes*workers)
	var stores []*kvstate.Store[counter]
	for p := range processes {
		js, kv := connect(t, e)
		// A short request timeout on three nodes: a request in flight at
		// the step-down gets no answer, and its write is in doubt.
		s := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js, Watch: p%2 == 0, Bounds: kvstate.Bounds{OpTimeout: 300 * time.Millisecond}})
		stores = append(stores, s)
		for range workers {
			wg.Go(func() {
				for range each {
					c, err := s.Update(ctx, "hot", increment)
					if err != nil {
						errs <- err
						return
					}
					if !c.Written || c.To.Value.N != c.From.Value.N+1 {
						errs <- fmt.Errorf("update %+v", c)
						return
					}
					if written.Add(1) == processes*workers*each/3 {
						once.Do(func() { close(third) })
					}
				}
			})
		}
	}
	if midRun != nil {
		select {
		case <-third:
			require.NoError(t, midRun(ctx))
		case <-ctx.Done():
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got, err := stores[0].Read(ctx, "hot")
	require.NoError(t, err)
	require.Equal(t, processes*workers*each, got.Value.N)
	require.EqualValues(t, processes*workers*each, written.Load())
	for i, s := range stores {
		t.Logf("store %d: %+v", i, s.Stats())
	}
}

// testConflict: a store whose cached value is outdated (no watch) writes
// against it, is refused, reads and decides again on the newer value.
func testConflict(t *testing.T, e server) {
	ctx := testCtx(t, 30*time.Second)
	js, kv := connect(t, e)
	a := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js})
	b := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js})

	_, err := a.Update(ctx, "conflict", increment) // a caches revision r1
	require.NoError(t, err)
	_, err = b.Update(ctx, "conflict", increment)
	require.NoError(t, err)

	var seen []int
	c, err := a.Update(ctx, "conflict", func(cur kvstate.Entry[counter], id string) (counter, bool, error) {
		seen = append(seen, cur.Value.N)
		return increment(cur, id)
	})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, seen, "decided on the cached value, refused, decided again on b's")
	require.Equal(t, 3, c.To.Value.N)
	require.EqualValues(t, 1, a.Stats().Conflicts)
}

// testWatch: with the watch, a write by another store reaches the cache,
// and Get serves it without a request.
func testWatch(t *testing.T, e server) {
	ctx := testCtx(t, 30*time.Second)
	js, kv := connect(t, e)
	var observed []uint64
	var mu sync.Mutex
	a := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js, Watch: true, Observe: func(_ string, e kvstate.Entry[counter]) {
		mu.Lock()
		observed = append(observed, e.Revision)
		mu.Unlock()
	}})
	b := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js})

	first, err := a.Get(ctx, "watched") // tracks the key, starts the watch
	require.NoError(t, err)
	require.False(t, first.Exists)
	require.True(t, a.Watching())
	c, err := b.Update(ctx, "watched", increment)
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if e, fresh, _ := a.Cached("watched"); !fresh || e.Revision != c.To.Revision {
			return errors.New("not watched yet")
		}
		return nil
	})
	reads := a.Stats().Reads
	got, err := a.Get(ctx, "watched")
	require.NoError(t, err)
	require.Equal(t, c.To, got)
	require.Equal(t, reads, a.Stats().Reads, "served from the cache")

	// Deleted: the watch says so.
	require.NoError(t, kv.Delete(ctx, "watched"))
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if e, _, _ := a.Cached("watched"); e.Exists {
			return errors.New("delete not watched yet")
		}
		return nil
	})
	mu.Lock()
	require.True(t, slices.IsSorted(observed), "observed in revision order: %v", observed)
	mu.Unlock()

	// Forgotten: no longer cached.
	a.Forget("watched")
	_, _, ok := a.Cached("watched")
	require.False(t, ok)
}

// lossy is a bucket whose Update replies are lost once armed: the write is
// done, the caller gets a timeout.
type lossy struct {
	jetstream.KeyValue
	lose atomic.Int32 // replies still to lose
}

func (l *lossy) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r, err := l.KeyValue.Update(ctx, key, value, rev)
	if err == nil && l.lose.Add(-1) >= 0 {
		return 0, context.DeadlineExceeded
	}
	return r, err
}

// testLostReply: a write whose reply is lost is found again by its id: the
// Update reports it written, and it is not applied twice.
func testLostReply(t *testing.T, e server) {
	ctx := testCtx(t, 30*time.Second)
	js, kv := connect(t, e)
	l := &lossy{KeyValue: kv}
	s := newStore(t, kvstate.Config[counter]{KV: l, JetStream: js})
	_, err := s.Update(ctx, "lost", increment)
	require.NoError(t, err)

	l.lose.Store(1)
	calls := 0
	c, err := s.Update(ctx, "lost", func(cur kvstate.Entry[counter], id string) (counter, bool, error) {
		calls++
		return increment(cur, id)
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "decided once: the read after the lost reply carries the write's id")
	require.True(t, c.Written)
	require.Equal(t, 1, c.From.Value.N)
	require.Equal(t, 2, c.To.Value.N)
	require.Contains(t, c.To.Value.Writers, c.Writer)
	got, err := s.Read(ctx, "lost")
	require.NoError(t, err)
	require.Equal(t, 2, got.Value.N, "applied once")
	require.Equal(t, got.Revision, c.To.Revision)
}

var errRefused = errors.New("refused")

func testCreateAndErrors(t *testing.T, e server) {
	ctx := testCtx(t, 30*time.Second)
	js, kv := connect(t, e)
	s := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js})

	got, created, err := s.Create(ctx, "made", counter{N: 7})
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := s.Create(ctx, "made", counter{N: 1})
	require.NoError(t, err)
	require.False(t, created, "an existing key is kept")
	require.Equal(t, got, again)

	// No write: the current value is returned, nothing is written.
	writes := s.Stats().Writes
	c, err := s.Update(ctx, "made", func(cur kvstate.Entry[counter], _ string) (counter, bool, error) {
		return cur.Value, false, nil
	})
	require.NoError(t, err)
	require.False(t, c.Written)
	require.Equal(t, 7, c.To.Value.N)
	require.Equal(t, writes, s.Stats().Writes)

	// The decision's error ends the Update.
	_, err = s.Update(ctx, "made", func(kvstate.Entry[counter], string) (counter, bool, error) {
		return counter{}, false, errRefused
	})
	require.ErrorIs(t, err, errRefused)

	// A value that does not decode fails at once.
	_, err = kv.Put(ctx, "garbage", []byte("{not json"))
	require.NoError(t, err)
	_, err = s.Update(ctx, "garbage", increment)
	require.Error(t, err)

	// A cancelled context, a closed Store, a missing WrittenBy.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Update(cancelled, "made", increment)
	require.ErrorIs(t, err, context.Canceled)
	noID, err := kvstate.New(kvstate.Config[counter]{KV: kv})
	require.NoError(t, err)
	_, err = noID.Update(ctx, "made", increment)
	require.ErrorContains(t, err, "WrittenBy")
	noID.Close()
	s.Close()
	_, err = s.Update(ctx, "made", increment)
	require.ErrorIs(t, err, kvstate.ErrClosed)
	_, err = kvstate.New(kvstate.Config[counter]{})
	require.ErrorContains(t, err, "Config.KV")
}

// Bounded bounds an Update in time and in rounds: a key that another
// writer changes before every write of this one ends the Update with the
// deadline after UpdateTimeout, or with ErrRounds after BoundedRounds.
func TestBoundedUpdate(t *testing.T) {
	srv := fleettest.RunServer(t)
	newBucket(t, srv.JS(), 1)
	js, kv := connect(t, srv)
	ctx := testCtx(t, 30*time.Second)
	contended := func(cur kvstate.Entry[counter], id string) (counter, bool, error) {
		_, err := kv.Put(ctx, "k", []byte(`{"n": 0}`)) // another writer, first: a conflict every round
		return cur.Value.add(id), true, err
	}
	s := newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js, Bounds: kvstate.Bounded(time.Second, 300*time.Millisecond, 5*time.Millisecond)})
	start := time.Now()
	_, err := s.Update(ctx, "k", contended)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
	s = newStore(t, kvstate.Config[counter]{KV: kv, JetStream: js, Bounds: kvstate.Bounded(time.Second, time.Minute, time.Microsecond)})
	_, err = s.Update(ctx, "k", contended)
	require.ErrorIs(t, err, kvstate.ErrRounds)
	require.ErrorContains(t, err, fmt.Sprintf("%d rounds", kvstate.BoundedRounds))
}
