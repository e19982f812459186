package natstest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// StaleReplica is a stream's replica on a node that stopped applying the
// stream's writes (its store is full, or it is cut off): it holds the
// stream up to a sequence and never more, and an ordered consumer placed on
// it delivers what it holds and then nothing, while saying nothing is
// pending and staying alive. An ordered consumer has one replica, on a
// server of the stream's picked at random: the first Placed consumers made
// through Stream are placed on this replica (their info names its node as
// their leader), later ones on a replica that applies every write. Consume
// and Messages are covered. Safe for concurrent use.
type StaleReplica struct {
	node     string
	last     uint64
	placed   atomic.Int64 // consumers still to place on the replica
	made     atomic.Int64
	withheld chan struct{}
	once     sync.Once
}

// NewStaleReplica returns the replica on node that holds the stream up to
// sequence last, on which the first placed consumers are made.
func NewStaleReplica(node string, last uint64, placed int) *StaleReplica {
	r := &StaleReplica{node: node, last: last, withheld: make(chan struct{})}
	r.placed.Store(int64(placed))
	return r
}

// Node is the name of the replica's node.
func (r *StaleReplica) Node() string { return r.node }

// Made is how many ordered consumers were made through Stream.
func (r *StaleReplica) Made() int { return int(r.made.Load()) }

// Withheld is closed once a consumer placed on the replica was to deliver a
// message stored after its last: the replica does not hold it.
func (r *StaleReplica) Withheld() <-chan struct{} { return r.withheld }

// Stream is s whose ordered consumers are placed as the replica says. Wrap
// a JetStream's streams with JetStream.
func (r *StaleReplica) Stream(s jetstream.Stream) jetstream.Stream {
	return &staleStream{Stream: s, r: r}
}

// JetStream is js whose streams named name are read as the replica says.
func (r *StaleReplica) JetStream(js jetstream.JetStream, name string) jetstream.JetStream {
	return &staleJetStream{JetStream: js, r: r, name: name}
}

type staleJetStream struct {
	jetstream.JetStream
	r    *StaleReplica
	name string
}

func (js *staleJetStream) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := js.JetStream.Stream(ctx, name)
	if err != nil || name != js.name {
		return s, err
	}
	return js.r.Stream(s), nil
}

type staleStream struct {
	jetstream.Stream
	r *StaleReplica
}

func (s *staleStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.Stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.r.made.Add(1)
	if s.r.placed.Add(-1) < 0 {
		return c, nil // on a replica that applies every write
	}
	return &staleConsumer{Consumer: c, r: s.r}, nil
}

// staleConsumer is an ordered consumer led from the stale replica.
type staleConsumer struct {
	jetstream.Consumer
	r *StaleReplica
}

func (c *staleConsumer) CachedInfo() *jetstream.ConsumerInfo {
	info := c.Consumer.CachedInfo()
	if info == nil {
		return nil
	}
	cp := *info
	cp.Cluster = &jetstream.ClusterInfo{Leader: c.r.node}
	return &cp
}

func (c *staleConsumer) Consume(handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	return c.Consumer.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil && md.Sequence.Stream > c.r.last {
			c.r.once.Do(func() { close(c.r.withheld) })
			return // not on this replica, and never will be
		}
		handler(m)
	}, opts...)
}

func (c *staleConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	if err != nil {
		return nil, err
	}
	return &staleMessages{MessagesContext: it, r: c.r}, nil
}

type staleMessages struct {
	jetstream.MessagesContext
	r *StaleReplica
}

// Next skips what the replica does not hold, until the call's context or
// wait ends.
func (it *staleMessages) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	for {
		m, err := it.MessagesContext.Next(opts...)
		if err != nil {
			return nil, err
		}
		if md, err := m.Metadata(); err == nil && md.Sequence.Stream > it.r.last {
			it.r.once.Do(func() { close(it.r.withheld) })
			continue
		}
		return m, nil
	}
}
