package natstest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// LaggingReplica is what a stream's ordered consumers see when their replica
// lags the stream's leader, as one just back from a cut-off does: an ordered
// consumer has one replica, on any server of the stream's, and counts
// pending from what that replica holds. The held-th message the consumers
// deliver (counted over all of them) says nothing is pending; the next is
// delivered once CatchUp is called, whatever the Next call's context or
// wait. Wrap a stream with Stream, or a JetStream's streams with JetStream.
// Safe for concurrent use.
type LaggingReplica struct {
	held      int64
	delivered atomic.Int64
	asked     chan struct{}
	askedOnce sync.Once
	caughtUp  chan struct{}
	catchUp   sync.Once
}

// NewLaggingReplica returns a replica that holds the first held messages
// its consumers deliver.
func NewLaggingReplica(held int) *LaggingReplica {
	return &LaggingReplica{held: int64(held), asked: make(chan struct{}), caughtUp: make(chan struct{})}
}

// Asked is closed when a consumer is asked for a message past the held ones.
func (r *LaggingReplica) Asked() <-chan struct{} { return r.asked }

// CatchUp lets the consumers deliver past the held messages.
func (r *LaggingReplica) CatchUp() { r.catchUp.Do(func() { close(r.caughtUp) }) }

// Stream is s as read through the replica: its ordered consumers' Messages
// lag.
func (r *LaggingReplica) Stream(s jetstream.Stream) jetstream.Stream {
	return &laggingStream{Stream: s, r: r}
}

// JetStream is js whose streams named name are read through the replica.
func (r *LaggingReplica) JetStream(js jetstream.JetStream, name string) jetstream.JetStream {
	return &laggingJetStream{JetStream: js, r: r, name: name}
}

type laggingJetStream struct {
	jetstream.JetStream
	r    *LaggingReplica
	name string
}

func (js *laggingJetStream) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := js.JetStream.Stream(ctx, name)
	if err != nil || name != js.name {
		return s, err
	}
	return js.r.Stream(s), nil
}

type laggingStream struct {
	jetstream.Stream
	r *LaggingReplica
}

func (s *laggingStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.Stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &laggingConsumer{Consumer: c, r: s.r}, nil
}

type laggingConsumer struct {
	jetstream.Consumer
	r *LaggingReplica
}

func (c *laggingConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	if err != nil {
		return nil, err
	}
	return &laggingMessages{MessagesContext: it, r: c.r}, nil
}

type laggingMessages struct {
	jetstream.MessagesContext
	r *LaggingReplica
}

func (it *laggingMessages) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	r := it.r
	if r.delivered.Load() >= r.held {
		r.askedOnce.Do(func() { close(r.asked) })
		<-r.caughtUp
	}
	m, err := it.MessagesContext.Next(opts...)
	if err != nil {
		return nil, err
	}
	if r.delivered.Add(1) == r.held {
		return laggingMsg{m}, nil
	}
	return m, nil
}

// laggingMsg is the held-th message: the replica has nothing after it.
type laggingMsg struct{ jetstream.Msg }

func (m laggingMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.Msg.Metadata()
	if err != nil {
		return nil, err
	}
	c := *md
	c.NumPending = 0
	return &c, nil
}
