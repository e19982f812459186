package budget

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/budget"
)

// Errors. A [*Deny] matches ErrExhausted with errors.Is.
var (
	// ErrExhausted matches every *Deny.
	ErrExhausted = budget.ErrExhausted
	// ErrNotFound: the job has no budget in the bucket.
	ErrNotFound = budget.ErrNotFound
	// ErrClosed: the Budget was closed.
	ErrClosed = budget.ErrClosed
	// ErrInvalidRecord: a budget that cannot be stored, or was read back
	// malformed.
	ErrInvalidRecord = budget.ErrInvalidRecord
	// ErrInvalidJob: the job's name is not a NATS subject token (letters,
	// digits, '-', '_'), nor <pool>.<job>.
	ErrInvalidJob = budget.ErrInvalidJob
)

// Record is a job's budget as the bucket holds it: Total, PerItemMax,
// Consumed and Exhausted (Consumed >= Total), and the Remaining method.
// It is a plain value, safe to copy.
type Record = budget.Record

// Grant is the outcome of a claim: Granted, or a Deny saying why not.
type Grant = budget.Grant

// Deny says why a claim was refused: Reason is messages.ReasonItemBudget
// or messages.ReasonJobBudget; Consumed and Limit are the item's retries
// and its cap, or the job's consumed units and its total. It is an error
// matching [ErrExhausted], to join with the item's last error.
type Deny = budget.Deny

// BucketConfig is the configuration of a budget bucket named bucket
// (jetfleet's is "fleet_budget"): one key per job, history 1, file
// storage, replicas as given. Create it with js.CreateOrUpdateKeyValue.
func BucketConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	return budget.BucketConfig(bucket, replicas)
}

// Option configures [New].
type Option = budget.Option

// WithJetStream sends the reads behind every compare-and-set to the
// bucket stream's leader: recommended on a replicated bucket, where a
// lagging replica may answer a plain KV read.
func WithJetStream(js jetstream.JetStream) Option { return budget.WithJetStream(js) }

// WithOpTimeout bounds each KV request; failed requests are retried with
// jittered backoff. Defaults to 2s.
func WithOpTimeout(d time.Duration) Option { return budget.WithOpTimeout(d) }

// Budget claims retries from the budgets of a KV bucket. One per process
// is the intended use. It is safe for concurrent use; Close stops it.
type Budget struct{ b *budget.Budget }

// New returns a Budget over kv, a bucket made with [BucketConfig]. It
// watches the bucket to learn of other processes' claims; Close stops it.
func New(kv jetstream.KeyValue, opts ...Option) (*Budget, error) {
	b, err := budget.New(kv, opts...)
	if err != nil {
		return nil, err
	}
	return &Budget{b: b}, nil
}

// Create stores job's budget: total retries for all its items together,
// at most perItemMax for one item (0: no cap beyond total). When the job
// already has one, Create keeps it and returns it with created false.
func (b *Budget) Create(ctx context.Context, job string, total, perItemMax int) (rec Record, created bool, err error) {
	if perItemMax <= 0 || perItemMax > total {
		perItemMax = total
	}
	return b.b.Create(ctx, job, Record{Total: total, PerItemMax: perItemMax})
}

// Claim asks for one retry of an item of job that has been granted
// itemRetries retries so far. The item's cap is checked first, then one
// unit is taken from the job by compare-and-set. An error is a failure to
// reach the bucket (retry later); a refusal is a Grant with a Deny.
func (b *Budget) Claim(ctx context.Context, job string, itemRetries int) (Grant, error) {
	return b.b.Claim(ctx, job, itemRetries)
}

// Get reads job's budget, or [ErrNotFound].
func (b *Budget) Get(ctx context.Context, job string) (Record, error) { return b.b.Get(ctx, job) }

// Forget drops what the Budget keeps of job (call it when the job ends).
// The record stays in the bucket.
func (b *Budget) Forget(job string) { b.b.Forget(job) }

// Close stops the Budget and waits for its goroutines; later calls return
// [ErrClosed]. It is idempotent.
func (b *Budget) Close() error { return b.b.Close() }
