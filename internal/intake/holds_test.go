package intake_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/intake"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A submission whose publish was answered is held from that moment on,
// although the server tells the consumer of it a moment later (its pending
// count alone misses it for a while): each of many submissions, checked
// the instant its publish returns, is held.
func TestHoldsASubmissionTheMomentItsPublishReturns(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := messages.Names{}
	stream, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{
		Name: names.JobsStream(), Subjects: []string{names.JobsSubmitSubject()},
	})
	require.NoError(t, err)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: intake.Consumer, AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	in := intake.New(intake.Config{JetStream: srv.JS(), Names: names})
	require.False(t, in.Holds(ctx), "an empty stream")

	// Each submission is taken in (acknowledged) before the next is
	// published, so the check after each publish sees only that one.
	for i := range 300 {
		_, err := srv.JS().Publish(ctx, names.JobsSubmitSubject(), []byte(`{}`))
		require.NoError(t, err)
		require.True(t, in.Holds(ctx), "submission %d, right after its publish", i)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			require.NoError(t, m.DoubleAck(ctx))
		}
		require.NoError(t, batch.Error())
	}
	require.False(t, in.Holds(ctx), "every submission was taken in")
}
