package jspub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetfleet/jetfleet/internal/jspub"
	"github.com/jetfleet/jetfleet/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.IgnoreServerGoroutines()) }

func msg(subject string, i int) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: []byte(fmt.Sprintf(`{"i":%d}`, i)),
		Header: nats.Header{nats.MsgIdHdr: []string{fmt.Sprintf("m%d", i)}}}
}

func TestSend(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := context.Background()
	// A stream that takes 10 messages, then refuses (DiscardNew), like a
	// full work stream.
	st, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"},
		MaxMsgs: 10, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	p, err := jspub.New(srv.Conn())
	require.NoError(t, err)
	defer p.Close()

	// 8 messages, 2 of them repeated ids: all stored or duplicates.
	var batch []*nats.Msg
	for i := range 8 {
		batch = append(batch, msg("w.a", i%6))
	}
	refused, last, err := p.Send(ctx, batch)
	require.NoError(t, err)
	require.Empty(t, refused)
	require.NoError(t, last)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(6), info.State.Msgs)

	// 8 more: 4 fit, the rest are refused with the server's reason, in
	// order.
	batch = batch[:0]
	for i := 100; i < 108; i++ {
		batch = append(batch, msg("w.a", i))
	}
	refused, last, err = p.Send(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, batch[4:], refused)
	var re *jspub.RefusedError
	require.ErrorAs(t, last, &re)
	require.Equal(t, 10077, re.ErrCode, "maximum messages exceeded")

	// No stream for the subject: no responders.
	refused, last, err = p.Send(ctx, []*nats.Msg{msg("nostream", 1)})
	require.NoError(t, err)
	require.Len(t, refused, 1)
	require.ErrorIs(t, last, nats.ErrNoResponders)

	// Over max_payload: an error, not a refusal.
	big := &nats.Msg{Subject: "w.a", Data: make([]byte, srv.Conn().MaxPayload()+1)}
	_, _, err = p.Send(ctx, []*nats.Msg{big})
	require.ErrorIs(t, err, nats.ErrMaxPayload)
}

func TestSendTimesOutMissingPubAcks(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Conn()
	// A plain subscriber takes the messages and never answers.
	sub, err := nc.SubscribeSync("silent")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	fire := make(chan time.Time, 1)
	var asked time.Duration
	p, err := jspub.New(nc, jspub.WithTimeout(3*time.Second), jspub.WithAfter(func(d time.Duration) <-chan time.Time {
		asked = d
		fire <- time.Time{}
		return fire
	}))
	require.NoError(t, err)
	defer p.Close()
	m := msg("silent", 1)
	refused, last, err := p.Send(context.Background(), []*nats.Msg{m})
	require.NoError(t, err)
	require.Equal(t, []*nats.Msg{m}, refused)
	require.ErrorIs(t, last, jspub.ErrTimeout)
	require.Equal(t, 3*time.Second, asked)
	_, err = sub.NextMsg(time.Second)
	require.NoError(t, err, "the message was sent")
}

func TestSendEndsWithTheContext(t *testing.T) {
	srv := natstest.RunServer(t)
	sub, err := srv.Conn().SubscribeSync("silent")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	p, err := jspub.New(srv.Conn())
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = p.Send(ctx, []*nats.Msg{msg("silent", 1)})
	require.ErrorIs(t, err, context.Canceled)
}

// BenchmarkSend publishes batches of 512 through Send and through nats.go's
// PublishMsgAsync with a PubAck timeout (what the coordinator used).
func BenchmarkSend(b *testing.B) {
	srv := natstest.RunServer(b)
	ctx := context.Background()
	_, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Storage: jetstream.MemoryStorage,
		Retention: jetstream.LimitsPolicy, MaxMsgs: 100_000})
	require.NoError(b, err)
	batch := func(n int) []*nats.Msg {
		out := make([]*nats.Msg, 512)
		for i := range out {
			out[i] = msg("w.a", n*512+i)
		}
		return out
	}
	b.Run("jspub", func(b *testing.B) {
		p, err := jspub.New(srv.Conn())
		require.NoError(b, err)
		defer p.Close()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			refused, _, err := p.Send(ctx, batch(n))
			require.NoError(b, err)
			require.Empty(b, refused)
			n++
		}
	})
	b.Run("PublishMsgAsync", func(b *testing.B) {
		js, err := jetstream.New(srv.Conn(), jetstream.WithPublishAsyncTimeout(10*time.Second), jetstream.WithPublishAsyncMaxPending(4096))
		require.NoError(b, err)
		b.ReportAllocs()
		n := 1 << 20
		for b.Loop() {
			var futs []jetstream.PubAckFuture
			for _, m := range batch(n) {
				f, err := js.PublishMsgAsync(m)
				require.NoError(b, err)
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			n++
		}
	})
}
