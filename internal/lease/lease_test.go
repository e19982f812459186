package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Short timings keep the tests quick; every wait below polls with a
// deadline far above them.
const (
	ttl   = 400 * time.Millisecond
	renew = 100 * time.Millisecond
)

// partitionable is a Store whose writes can be made to fail, as if the
// holder were cut off from the server.
type partitionable struct {
	jetstream.KeyValue
	cut       atomic.Bool
	loseReply atomic.Bool // the next update is stored, but its reply lost
}

var errCut = errors.New("partitioned")

func (p *partitionable) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if p.cut.Load() {
		<-ctx.Done() // a write that never comes back
		return 0, errCut
	}
	rev, err := p.KeyValue.Update(ctx, key, value, rev)
	if err == nil && p.loseReply.CompareAndSwap(true, false) {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// member is one process campaigning: terms records its leadership terms.
type member struct {
	name   string
	l      *lease.Lease
	store  *partitionable
	cancel context.CancelFunc
	done   chan struct{}
	log    *termLog
}

// termLog records every term's start and end, across members, in order.
type termLog struct {
	mu     sync.Mutex
	events []string // "+a", "-a"
	active map[string]bool
	overlp bool // two members led at once
}

func (tl *termLog) add(ev string, name string, on bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, ev)
	if on {
		for other, a := range tl.active {
			if a && other != name {
				tl.overlp = true
			}
		}
	}
	tl.active[name] = on
}

func (tl *termLog) leaders() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var s []string
	for n, a := range tl.active {
		if a {
			s = append(s, n)
		}
	}
	return s
}

func startMember(t *testing.T, kv jetstream.KeyValue, js jetstream.JetStream, name string, tl *termLog) *member {
	t.Helper()
	st := &partitionable{KeyValue: kv}
	l, err := lease.New(lease.Config{
		Store: st, Reader: kvleader.New(js, kv.Bucket()), Key: "leader", Holder: name, TTL: ttl, Renew: renew,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, l: l, store: st, cancel: cancel, done: make(chan struct{}), log: tl}
	go func() {
		defer close(m.done)
		_ = l.Run(ctx, func(ctx context.Context) {
			tl.add("+"+name, name, true)
			<-ctx.Done()
			tl.add("-"+name, name, false)
		})
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	m.cancel()
	<-m.done
}

func setup(t *testing.T) (jetstream.KeyValue, jetstream.JetStream) {
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := srv.JS().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "control", History: 1})
	require.NoError(t, err)
	return kv, srv.JS()
}

func waitLeader(t *testing.T, tl *termLog, except string) string {
	t.Helper()
	var got string
	require.Eventually(t, func() bool {
		ls := tl.leaders()
		if len(ls) == 1 && ls[0] != except {
			got = ls[0]
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	return got
}

func TestOneLeaderAndHandOver(t *testing.T) {
	kv, js := setup(t)
	tl := &termLog{active: map[string]bool{}}
	members := map[string]*member{}
	for _, n := range []string{"a", "b", "c"} {
		members[n] = startMember(t, kv, js, n, tl)
	}
	first := waitLeader(t, tl, "")
	require.True(t, members[first].l.IsLeader())

	// A leader that stops releases the key: another takes over without
	// waiting for the TTL (bounded here by a generous 10 s).
	members[first].stop()
	second := waitLeader(t, tl, first)
	require.NotEqual(t, first, second)
	require.False(t, tl.overlp, "two leaders at once: %v", tl.events)
}

// TestFencedBeforeTakeover: a leader cut off from the server steps down
// (its context ends) before another member's term begins.
func TestFencedBeforeTakeover(t *testing.T) {
	kv, js := setup(t)
	tl := &termLog{active: map[string]bool{}}
	a := startMember(t, kv, js, "a", tl)
	waitLeader(t, tl, "")
	b := startMember(t, kv, js, "b", tl)
	a.store.cut.Store(true)
	require.Equal(t, "b", waitLeader(t, tl, "a"))
	tl.mu.Lock()
	events := append([]string(nil), tl.events...)
	tl.mu.Unlock()
	require.Equal(t, []string{"+a", "-a", "+b"}, events)
	require.False(t, tl.overlp)
	require.Eventually(t, func() bool { return a.l.Holder() == "b" }, 10*time.Second, 5*time.Millisecond, "the deposed member sees the new holder")
	require.True(t, b.l.IsLeader())
}

// TestOverwrittenLeaseStepsDown: a holder whose renewal is refused
// (someone else wrote the key) steps down at once.
func TestOverwrittenLeaseStepsDown(t *testing.T) {
	kv, js := setup(t)
	tl := &termLog{active: map[string]bool{}}
	startMember(t, kv, js, "a", tl)
	waitLeader(t, tl, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := kv.Put(ctx, "leader", []byte(`{"holder":"intruder"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(tl.leaders()) == 0 }, 10*time.Second, 5*time.Millisecond)
	// The intruder never renews: a takes the key back after the TTL.
	waitLeader(t, tl, "")
}

func TestConfig(t *testing.T) {
	_, err := lease.New(lease.Config{})
	require.ErrorContains(t, err, "store and reader are required")
	require.ErrorContains(t, err, "key and holder are required")
	kv, js := setup(t)
	_, err = lease.New(lease.Config{Store: kv, Reader: kvleader.New(js, "control"), Key: "k", Holder: "h", TTL: time.Second, Renew: 600 * time.Millisecond})
	require.ErrorContains(t, err, "at most half the ttl")
}

// TestLostReplyKeepsTheLease: a renewal stored but whose reply was lost
// makes the next renewal conflict with the holder's own write; the holder
// sees its value in the key and goes on leading.
func TestLostReplyKeepsTheLease(t *testing.T) {
	kv, js := setup(t)
	tl := &termLog{active: map[string]bool{}}
	a := startMember(t, kv, js, "a", tl)
	waitLeader(t, tl, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, "leader")
	require.NoError(t, err)
	a.store.loseReply.Store(true)
	// Wait for the lost renewal and several more.
	require.Eventually(t, func() bool {
		cur, err := kv.Get(ctx, "leader")
		return err == nil && cur.Revision() >= e.Revision()+4 && !a.store.loseReply.Load()
	}, 10*time.Second, 5*time.Millisecond)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	require.Equal(t, []string{"+a"}, tl.events, "one term, never stepped down")
	require.True(t, a.l.IsLeader())
}

// A holder whose clock jumps past its lease (a process paused, then
// resumed) is not Current at once, though it still says it leads until
// its next renewal attempt steps it down.
func TestPausedHolderIsNotCurrent(t *testing.T) {
	kv, js := setup(t)
	clk := clock.NewManual(time.Now())
	l, err := lease.New(lease.Config{
		Store: kv, Reader: kvleader.New(js, kv.Bucket()), Key: "leader", Holder: "a", TTL: time.Hour, Renew: 10 * time.Minute, Clock: clk,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx, func(ctx context.Context) { <-ctx.Done() })
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, l.Current, 10*time.Second, 5*time.Millisecond)
	require.True(t, l.IsLeader())
	clk.Advance(50 * time.Minute) // TTL less one renew interval
	require.False(t, l.Current(), "paused past its lease by its own clock")
	require.True(t, l.IsLeader(), "no renewal attempt has run yet (every 10 minutes of real time)")
}
