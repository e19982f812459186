package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// 100 dead letters of ~900 KB each: dlq.list and dlq.stats answer, list
// in pages bounded by max_payload, and the coordinator's connection is never
// cut as a slow consumer (a pull of 256 such entries at a time would have
// the server queue 230 MB for one connection).
func TestLargeDeadLettersDoNotCutTheCoordinator(t *testing.T) {
	// Beside the others: it bounds no time and counts only its own
	// server's slow consumers (under -race it takes 41 s, most of it
	// decoding the entries, alone it held the package that long).
	t.Parallel()
	srv := fleettest.RunServer(t)
	var mu sync.Mutex
	var asyncErrs []error
	nc := srv.Connect(t, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		asyncErrs = append(asyncErrs, err)
		mu.Unlock()
	}))
	cfg := Config{Provision: Provision(testProv), StatusInterval: 20 * time.Millisecond}
	cfg.Provision.DLQMaxBytes = 256 << 20
	c, err := New(nc, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	<-c.Ready()

	const entries = 100
	// Written as the coordinator writes its own dead letters, straight to
	// the DLQ stream: a pool's writer would first try the pool's
	// dead-letter stream, which no job has made here, and wait out
	// JetStream's retries of a publish nobody answers (some 0.7 s an
	// entry) before falling back to the same stream.
	w := dlq.NewWriter(srv.JS(), messages.MustNames("fleet"), messages.CoordinatorOrigin)
	big := strings.Repeat("x", 900<<10)
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer wcancel()
	for i := range entries {
		payload, _ := json.Marshal(map[string]string{"blob": big})
		require.NoError(t, w.Write(wctx, &messages.DLQEntry{JobID: "big", ItemID: fmt.Sprintf("i%03d", i), Index: int64(i),
			Pool: "default", Payload: payload, Reason: messages.ReasonAttempts, Error: "boom", DeadLetteredAt: time.Now()}))
	}

	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	// The first pages (a page holds what fits in max_payload: one entry),
	// each read from its after_seq; stats reads every entry.
	var after uint64
	for range 5 {
		page, err := cl.DLQList(rctx, messages.DLQFilter{JobID: "big", AfterSeq: after, Limit: entries})
		require.NoError(t, err)
		require.Len(t, page.Entries, 1)
		require.True(t, page.More)
		after = page.NextSeq
	}
	for range 2 {
		st, err := cl.DLQStats(rctx, messages.DLQFilter{JobID: "big"})
		require.NoError(t, err)
		require.Equal(t, int64(entries), st.ByJob["big"])
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range asyncErrs {
		require.False(t, errors.Is(err, nats.ErrSlowConsumer), "the coordinator was a slow consumer: %v", err)
	}
	require.Zero(t, nc.Stats().Reconnects, "the coordinator's connection was never cut")
	require.Zero(t, srv.NATSServer().NumSlowConsumers(), "no slow consumer on the server")
}
