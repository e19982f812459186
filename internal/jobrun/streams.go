package jobrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvleader"
)

// streamCache holds the coordinator's stream handles, each looked up
// once, and its one purge: for a job's map end and for its cleanup
// (internal/retention). It is safe for concurrent use.
type streamCache struct {
	js jetstream.JetStream
	m  sync.Map // name → jetstream.Stream
}

// Stream returns a handle of the named stream, looked up once.
func (s *streamCache) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := s.m.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	s.m.Store(name, st)
	return st, nil
}

// Purge removes stream's messages on subject (a filter).
func (s *streamCache) Purge(ctx context.Context, stream, subject string) error {
	// A read first: a purge writes to the store even when it removes
	// nothing, and most jobs have no breaker keys, leftover work or (when
	// nothing failed) item state.
	stored, err := kvleader.AnyStored(ctx, s.js, stream, subject)
	if err == nil && !stored {
		return nil
	}
	st, err := s.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // a pool's park stream that was never made
	}
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		return fmt.Errorf("purging %s from %s: %w", subject, stream, err)
	}
	return nil
}

// stream returns a handle of the named stream, looked up once.
func (c *Coordinator) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return c.streams.Stream(ctx, name)
}

// purgeSubject removes stream's messages on subject (a filter): the one
// purge of the coordinator, for a job's map end and for its cleanup.
func (c *Coordinator) purgeSubject(ctx context.Context, stream, subject string) error {
	return c.streams.Purge(ctx, stream, subject)
}
