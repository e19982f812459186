package natsconn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/natsconn"
)

// fakeTime is a clock whose pauses pass at once and move now by their
// length.
type fakeTime struct {
	now    time.Time
	pauses []time.Duration
}

func (f *fakeTime) Now() time.Time { return f.now }

func (f *fakeTime) After(d time.Duration) <-chan time.Time {
	f.pauses = append(f.pauses, d)
	f.now = f.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- f.now
	return ch
}

// While no JetStream answers, Reach keeps trying with a doubling pause and
// warns once (again only after ReachRepeat), naming the domain setting;
// then it returns what the call returns.
func TestReachWaitsOutNoResponders(t *testing.T) {
	var logs bytes.Buffer
	clk := &fakeTime{now: time.Unix(1_700_000_000, 0)}
	r := natsconn.Reacher{Logger: zerolog.New(&logs), Domain: "hub", Clock: clk, Now: func() time.Time { return clk.now }}
	tries := 0
	err := r.Reach(context.Background(), "work consumer agents-site-b", func(context.Context) error {
		tries++
		if tries < 30 {
			return errors.Join(errors.New("provision: consumer agents-site-b"), nats.ErrNoResponders)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 30, tries)
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}, clk.pauses[:4])
	require.Equal(t, natsconn.ReachMax, clk.pauses[len(clk.pauses)-1], "the pause stops doubling at ReachMax")
	warnings := strings.Count(logs.String(), `"level":"warn"`)
	// 29 failures over ~12.5 minutes: a warning at the start and one per ReachRepeat.
	require.Equal(t, 3, warnings, logs.String())
	require.Contains(t, logs.String(), "--js-domain")
	require.Contains(t, logs.String(), "FLEET_JS_DOMAIN")
	require.Contains(t, logs.String(), `"js_domain":"hub"`)
	require.Contains(t, logs.String(), "JetStream answers: work consumer agents-site-b")
}

// Any other error is returned at once, as is the end of ctx.
func TestReachReturnsOtherErrors(t *testing.T) {
	boom := errors.New("boom")
	tries := 0
	err := natsconn.Reacher{Clock: clock.AfterFunc(func(time.Duration) <-chan time.Time { t.Fatal("no pause"); return nil })}.
		Reach(context.Background(), "x", func(context.Context) error { tries++; return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, tries)

	ctx, cancel := context.WithCancel(context.Background())
	err = natsconn.Reacher{}.Reach(ctx, "x", func(context.Context) error { cancel(); return jetstream.ErrJetStreamNotEnabled })
	require.ErrorIs(t, err, context.Canceled)
}

// A request's own timeout (a cluster electing its leaders, a slow server)
// is waited out too, with a warning that says what to check; the end of
// ctx is not.
func TestReachWaitsOutTimeouts(t *testing.T) {
	var logs bytes.Buffer
	clk := &fakeTime{now: time.Unix(1_700_000_000, 0)}
	r := natsconn.Reacher{Logger: zerolog.New(&logs), Clock: clk, Now: func() time.Time { return clk.now }}
	tries := 0
	err := r.Reach(context.Background(), "provisioning streams and buckets", func(context.Context) error {
		tries++
		switch tries {
		case 1:
			return fmt.Errorf("provision: stream FLEET_WORK: %w", context.DeadlineExceeded)
		case 2:
			return nats.ErrTimeout
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, tries)
	require.Len(t, clk.pauses, 2)
	require.Contains(t, logs.String(), "no answer in time")

	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	err = natsconn.Reacher{}.Reach(ctx, "x", func(ctx context.Context) error { return ctx.Err() })
	require.ErrorIs(t, err, context.DeadlineExceeded, "ctx's own end is returned")
}
