package itemrun

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The narrow interfaces of what the agent's item path (process.go,
// failure.go) reads and writes, so that it runs in unit tests without a
// server (failure_test.go). Run fills them with the real thing.

// itemStore holds the items' retry states: the fleet_items bucket
// (jetstream.KeyValue), written with compare-and-set on the revision.
type itemStore interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// retryBudget is the jobs' retry budgets (*budget.Budget).
type retryBudget interface {
	Claim(ctx context.Context, job string, itemRetries int) (budget.Grant, error)
	Forget(job string)
	Close() error
}

// deadLetters stores dead-letter entries and waits for the PubAck
// (*dlq.Writer).
type deadLetters interface {
	Write(ctx context.Context, e *messages.DLQEntry) error
}

// publisher publishes results and events (jetstream.JetStream): async,
// with the ack loop awaiting a result's PubAck before it acks the work
// message, and again synchronously when that PubAck failed.
type publisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// breakerStates reads and writes the jobs' circuit breaker states
// (gateStates, over internal/breaker's Gate): update applies fn to a job's state and stores the result
// with compare-and-set, returning the state fn last saw and its result.
type breakerStates interface {
	update(ctx context.Context, job string, fn func(now time.Time, st retry.BreakerState) retry.BreakerState) (from, to retry.BreakerState, err error)
	forget(job string)
	close()
}
