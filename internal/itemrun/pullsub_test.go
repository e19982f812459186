package itemrun

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
)

// pullSubFixture is a WorkQueue stream of msgs messages, its consumer and
// a pull subscription on it.
func pullSubFixture(t *testing.T, msgs int) (*pullSub, jetstream.Consumer) {
	srv := fleettest.RunServer(t)
	ctx := testCtx(t, 30*time.Second)
	js := srv.JS()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	for range msgs {
		_, err := js.Publish(ctx, "w.x", []byte("item"))
		require.NoError(t, err)
	}
	cons, err := js.CreateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)
	ps, err := newPullSub(srv.Conn(), jetstream.DefaultAPIPrefix, cons)
	require.NoError(t, err)
	t.Cleanup(func() { ps.close(nil) })
	return ps, cons
}

// next reads the next work message, skipping the server's statuses.
func nextWork(t *testing.T, ps *pullSub) *pulledMsg {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-ps.in:
			if !isStatus(m) {
				return newPulledMsg(ps.nc, m)
			}
		case <-timeout:
			t.Fatal("no work message")
		}
	}
}

// The acknowledgements of a message pulled on the pull subscription are
// JetStream's: each one is sent once, and the server acts on it.
func TestPulledMsgAcknowledgements(t *testing.T) {
	checkLeaks(t)
	ps, cons := pullSubFixture(t, 4)
	ctx := testCtx(t, 30*time.Second)
	_, err := ps.request(4, 5*time.Second, time.Now())
	require.NoError(t, err)
	ms := []*pulledMsg{nextWork(t, ps), nextWork(t, ps), nextWork(t, ps), nextWork(t, ps)}

	md, err := ms[0].Metadata()
	require.NoError(t, err)
	require.Equal(t, "W", md.Stream)
	require.Equal(t, "c", md.Consumer)
	require.EqualValues(t, 1, md.Sequence.Stream)
	require.EqualValues(t, 1, md.NumDelivered)
	require.Equal(t, "w.x", ms[0].Subject())
	require.Equal(t, []byte("item"), ms[0].Data())

	require.NoError(t, ms[0].InProgress())
	require.NoError(t, ms[0].InProgress(), "progress may be reported again")
	require.NoError(t, ms[0].DoubleAck(ctx))
	require.ErrorIs(t, ms[0].Ack(), jetstream.ErrMsgAlreadyAckd)
	require.NoError(t, ms[1].Term())
	require.NoError(t, ms[2].TermWithReason("bad input"))
	require.NoError(t, ms[3].NakWithDelay(200*time.Millisecond))
	require.ErrorIs(t, ms[3].Nak(), jetstream.ErrMsgAlreadyAckd)

	// The nak'd one comes back after its delay, once more delivered.
	_, err = ps.request(1, 5*time.Second, time.Now())
	require.NoError(t, err)
	again := nextWork(t, ps)
	md, err = again.Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 4, md.Sequence.Stream)
	require.EqualValues(t, 2, md.NumDelivered)
	require.NoError(t, again.Ack())
	fleettest.WaitFor(t, 10*time.Second, func() error {
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumAckPending != 0 || ci.NumPending != 0 {
			return fmt.Errorf("%d pending, %d ack pending", ci.NumPending, ci.NumAckPending)
		}
		return nil
	})
}

// A request given up and the one made after it both answer on the pull
// subscription: whatever the first still delivers arrives.
func TestPullSubKeepsWhatARequestGivenUpDelivers(t *testing.T) {
	checkLeaks(t)
	ps, _ := pullSubFixture(t, 6)
	first, err := ps.request(3, 5*time.Second, time.Now())
	require.NoError(t, err)
	second, err := ps.request(3, 5*time.Second, time.Now())
	require.NoError(t, err)
	require.NotEqual(t, first.id, second.id)
	seen := map[uint64]bool{}
	for range 6 {
		md, err := nextWork(t, ps).Metadata()
		require.NoError(t, err)
		seen[md.Sequence.Stream] = true
	}
	require.Len(t, seen, 6)
}

// Closing the pull subscription gives back (naks) what is still arriving
// and what the loop held: another subscription gets all of it at once.
func TestPullSubCloseGivesBackWhatArrives(t *testing.T) {
	checkLeaks(t)
	ps, cons := pullSubFixture(t, 5)
	_, err := ps.request(5, 5*time.Second, time.Now())
	require.NoError(t, err)
	held := []jetstream.Msg{nextWork(t, ps)}
	ps.close(held)

	next, err := newPullSub(ps.nc, jetstream.DefaultAPIPrefix, cons)
	require.NoError(t, err)
	defer next.close(nil)
	_, err = next.request(5, 5*time.Second, time.Now())
	require.NoError(t, err)
	for range 5 {
		md, err := nextWork(t, next).Metadata()
		require.NoError(t, err)
		// 2 for what the closed subscription had received (given back
		// at once, not after AckWait); 1 for what the server had not
		// sent it yet when it closed.
		require.LessOrEqual(t, md.NumDelivered, uint64(2), "redelivered at once, not after AckWait")
	}
}
