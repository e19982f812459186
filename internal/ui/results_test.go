package ui

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natstest"
)

// A read of a job's results goes on to the last one the stream's leader
// held when the page asked, even when its ordered consumer sits on a
// replica that lags the leader and says nothing is pending before then:
// the page would otherwise show part of the results as all of them.
func TestReadSubjectReadsPastALaggingReplica(t *testing.T) {
	t.Parallel()
	const msgs, held = 20, 5
	ctx := context.Background()
	js, s := resultsStream(t, msgs)
	lag := natstest.NewLaggingReplica(held)
	type read struct {
		last, left uint64
		err        error
	}
	var got [][]byte
	done := make(chan read, 1)
	go func() {
		// No deadline that matters: how long the replica takes to catch
		// up is the test's.
		last, left, err := readSubject(ctx, js, lag.Stream(s), "results.a", 0, msgs, msgs, time.Now().Add(time.Hour), func(data []byte, _ time.Time) {
			got = append(got, data)
		})
		done <- read{last, left, err}
	}()
	select {
	case <-lag.Asked():
	case r := <-done:
		t.Fatalf("the read ended at %d (%d left, %v) without reading past the lagging replica", r.last, r.left, r.err)
	}
	lag.CatchUp()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, uint64(msgs), r.last)
	require.Zero(t, r.left)
	require.Len(t, got, msgs)
}

// A read whose bound the leader no longer holds (the rest was deleted since
// it was taken) ends where the replica's messages end, without waiting for
// the replica.
func TestReadSubjectEndsWhereTheLeaderHoldsNoMore(t *testing.T) {
	t.Parallel()
	const msgs, held = 20, 5
	ctx := context.Background()
	js, s := resultsStream(t, msgs)
	for seq := uint64(held + 1); seq <= msgs; seq++ {
		require.NoError(t, s.DeleteMsg(ctx, seq))
	}
	lag := natstest.NewLaggingReplica(held)
	type read struct {
		last, left uint64
		err        error
	}
	done := make(chan read, 1)
	go func() {
		last, left, err := readSubject(ctx, js, lag.Stream(s), "results.a", 0, msgs, msgs, time.Now().Add(time.Hour), func([]byte, time.Time) {})
		done <- read{last, left, err}
	}()
	var r read
	select {
	case r = <-done:
	case <-lag.Asked():
		lag.CatchUp()
		t.Fatal("the read waited for messages the leader no longer holds")
	}
	require.NoError(t, r.err)
	require.Equal(t, uint64(held), r.last)
	require.Zero(t, r.left)
}

// resultsStream is a server with a stream RESULTS holding n messages on
// results.a (sequences 1 to n).
func resultsStream(t *testing.T, n int) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js := natstest.RunServer(t).JS()
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "RESULTS", Subjects: []string{"results.>"}})
	require.NoError(t, err)
	for i := range n {
		_, err := js.Publish(context.Background(), "results.a", fmt.Append(nil, i))
		require.NoError(t, err)
	}
	return js, s
}
