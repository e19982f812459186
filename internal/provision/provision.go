// Package provision creates and updates jetfleet's NATS resources (docs/contract.md §2):
// streams, the per-pool work consumers, KV buckets and the input object store.
// Every call is idempotent, so coordinators call Ensure at every start.
package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// Defaults of Config.
const (
	DefaultReplicas      = 1
	DefaultAckWait       = 30 * time.Second
	DefaultMaxDeliver    = 100
	DefaultMaxAckPending = 20000
	DefaultWorkMaxMsgs   = 2_000_000
	DefaultWorkDupWindow = 10 * time.Minute
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultDLQMaxAge     = 30 * 24 * time.Hour
	DefaultDLQMaxBytes   = 256 << 20
	// DefaultUploadsTTL is how long an upload waits in the uploads bucket
	// for its job to be accepted (the coordinator deletes it then).
	DefaultUploadsTTL = 24 * time.Hour
	// AgentsTTL is the max age of an agent's presence key: an agent that
	// died without deleting it leaves the agents bucket after this long.
	AgentsTTL = time.Minute
	// JobsMarkerTTL is the jobs bucket's LimitMarkerTTL. The bucket has no
	// max age, so no key ages out; setting it enables the per-message TTL
	// that deleted records' markers carry.
	JobsMarkerTTL = time.Hour
)

// Config sizes the resources. The zero value is usable: WithDefaults fills it.
type Config struct {
	// Replicas of every stream and bucket (1 or 3). Defaults to 1.
	Replicas int
	// AckWait is the crash-detection timeout of work consumers: an item whose
	// agent neither acks nor sends InProgress within it is redelivered.
	// Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver is the backstop on deliveries of one work message, above any
	// configured attempts (snoozes and breaker parking also count). Defaults to 100.
	MaxDeliver int
	// MaxAckPending bounds a pool's unacknowledged work messages, in flight
	// and parked in a delayed nak. Defaults to 20000.
	MaxAckPending int
	// WorkMaxMsgs and WorkMaxBytes bound the work stream; publishers past the
	// limit are refused (DiscardNew) and back off. Defaults: 2,000,000 / unlimited.
	WorkMaxMsgs  int64
	WorkMaxBytes int64
	// Retention is the MaxAge of the jobs (submissions), events and
	// advisories streams. Defaults to 7d. Results, item state and inputs
	// have no age limit: a job's are removed when it settles (the
	// coordinator's retention), so a long job's are kept however old.
	Retention time.Duration
	// DLQMaxAge, DLQMaxBytes, DLQMaxMsgs bound the dead-letter stream; when it
	// is full publishes fail and agents retry later. Defaults: 30d / 256 MiB / unlimited. MaxBytes is reserved
	// from the account's JetStream storage when the stream is created.
	DLQMaxAge   time.Duration
	DLQMaxBytes int64
	DLQMaxMsgs  int64
	// UploadsTTL is the MaxAge of the uploads bucket: uploads whose job was
	// never accepted are removed after it. Defaults to 24h.
	UploadsTTL time.Duration
	// Memory selects memory storage (tests only). Defaults to file storage.
	Memory bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.WorkMaxMsgs == 0 {
		c.WorkMaxMsgs = DefaultWorkMaxMsgs
	}
	if c.WorkMaxBytes == 0 {
		c.WorkMaxBytes = -1
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = DefaultDLQMaxAge
	}
	if c.DLQMaxBytes == 0 {
		c.DLQMaxBytes = DefaultDLQMaxBytes
	}
	if c.DLQMaxMsgs == 0 {
		c.DLQMaxMsgs = -1
	}
	if c.UploadsTTL == 0 {
		c.UploadsTTL = DefaultUploadsTTL
	}
	return c
}

// Validate reports every out-of-range field.
func (c Config) Validate() error {
	var errs []error
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Errorf("replicas: %d, want 1, 3 or 5", c.Replicas))
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack_wait: %s, want >= 1s", c.AckWait))
	}
	if c.MaxDeliver < 2 {
		errs = append(errs, fmt.Errorf("max_deliver: %d, want >= 2", c.MaxDeliver))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("max_ack_pending: %d, want >= 1", c.MaxAckPending))
	}
	return errors.Join(errs...)
}

func (c Config) storage() jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Streams returns the stream configurations of docs/contract.md §2.
func Streams(n messages.Names, c Config) []jetstream.StreamConfig {
	c = c.WithDefaults()
	st := c.storage()
	return []jetstream.StreamConfig{
		{
			Name: n.JobsStream(), Subjects: []string{n.JobsSubmitSubject()},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			MaxAge: c.Retention, Duplicates: DefaultWorkDupWindow,
			Description: "jetfleet durable job intake",
		},
		// Parked retries (docs/retries.md "Parking"): message schedules,
		// which the work stream cannot hold (schedules refuse DiscardNew,
		// the work stream's backpressure). WorkQueue: a schedule is
		// removed when it fires, and the fired copy once the work stream
		// has sourced it. No limits: a parked item is never discarded.
		{
			Name: n.ParkStream(), Subjects: []string{n.ParkFilter()},
			Retention: jetstream.WorkQueuePolicy, Storage: st, Replicas: c.Replicas,
			AllowMsgSchedules: true, AllowRollup: true,
			Duplicates:  DefaultWorkDupWindow,
			Description: "jetfleet parked retries (message schedules)",
		},
		{
			Name: n.WorkStream(), Subjects: []string{n.WorkFilter()},
			Retention: jetstream.WorkQueuePolicy, Storage: st, Replicas: c.Replicas,
			Discard: jetstream.DiscardNew, MaxMsgs: c.WorkMaxMsgs, MaxBytes: c.WorkMaxBytes,
			Duplicates:  DefaultWorkDupWindow,
			Description: "jetfleet work items",
			// Parked items come back when due: the park stream's fired
			// copies, on the pool's work subject. A full work stream
			// refuses them as it refuses the coordinator; the server
			// retries the source from the refused one.
			Sources: []*jetstream.StreamSource{parkSource(n)},
		},
		{
			// No MaxAge: a job's results are kept while it is open, whatever
			// their age (its counts are rebuilt from them), and purged when
			// it settles. Ensure updates streams provisioned with one.
			Name: n.ResultsStream(), Subjects: []string{n.ResultsFilter()},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			Duplicates:  2 * time.Minute,
			Description: "jetfleet item outcomes",
		},
		{
			Name: n.DLQStream(), Subjects: []string{n.DLQFilter()},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			Discard: jetstream.DiscardNew, MaxAge: c.DLQMaxAge, MaxBytes: c.DLQMaxBytes, MaxMsgs: c.DLQMaxMsgs,
			Duplicates:  DefaultWorkDupWindow,
			Description: "jetfleet dead letters (browsable; never WorkQueue)",
		},
		{
			Name: n.EventsStream(), Subjects: []string{n.EventsFilter()},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			MaxAge:      c.Retention,
			Description: "jetfleet job lifecycle events",
		},
		{
			Name: n.AdvisoriesStream(), Subjects: []string{n.MaxDeliveriesAdvisory("*")},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			MaxAge:      c.Retention,
			Description: "jetfleet MAX_DELIVERIES advisories of the work stream",
		},
	}
}

// parkSource is the work stream's source of parked items that are due.
func parkSource(n messages.Names) *jetstream.StreamSource {
	src, dest := n.ParkDueTransform()
	return &jetstream.StreamSource{
		Name:              n.ParkStream(),
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: src, Destination: dest}},
	}
}

// Buckets returns the KV bucket configurations.
func Buckets(n messages.Names, c Config) []jetstream.KeyValueConfig {
	c = c.WithDefaults()
	st := c.storage()
	return []jetstream.KeyValueConfig{
		// LimitMarkerTTL allows per-message TTLs: a deleted record's purge
		// marker expires (the coordinator's retention).
		{Bucket: n.JobsBucket(), History: 1, Storage: st, Replicas: c.Replicas, LimitMarkerTTL: JobsMarkerTTL, Description: "jetfleet jobs: spec, status"},
		{Bucket: n.BudgetBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet job retry budgets"},
		{Bucket: n.ItemsBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet per-item retry state"},
		{Bucket: n.BreakerBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet job circuit breakers"},
		{Bucket: n.LimitsBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet rate and concurrency limits"},
		{Bucket: n.AgentsBucket(), History: 1, Storage: st, Replicas: c.Replicas, TTL: AgentsTTL, Description: "jetfleet agents' presence"},
		{Bucket: n.ControlBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet coordinators: the leader's lease, DLQ replays, cancel requests"},
	}
}

// ObjectStores returns the object store configurations: the inputs of
// accepted jobs and their reduce inputs (written by the coordinator only),
// and the uploads submitters write.
func ObjectStores(n messages.Names, c Config) []jetstream.ObjectStoreConfig {
	c = c.WithDefaults()
	return []jetstream.ObjectStoreConfig{
		{
			// No TTL: a job's objects are kept while it is open and deleted
			// when it settles (the coordinator's retention).
			Bucket: n.InputsBucket(), Storage: c.storage(), Replicas: c.Replicas,
			Description: "jetfleet inputs of accepted jobs and map results for reduce (coordinator-written)",
		},
		{
			Bucket: n.UploadsBucket(), Storage: c.storage(), Replicas: c.Replicas, TTL: c.UploadsTTL,
			Description: "jetfleet inputs uploaded by submitters, copied to the inputs bucket when their job is accepted",
		},
	}
}

// WorkConsumer is the configuration of pool's durable pull consumer: no
// BackOff (agents compute delays and NakWithDelay; docs/jetstream.md §1), AckWait
// as crash timeout, MaxDeliver as backstop.
func WorkConsumer(n messages.Names, pool string, c Config) jetstream.ConsumerConfig {
	c = c.WithDefaults()
	return jetstream.ConsumerConfig{
		Durable:       n.AgentsConsumer(pool),
		Description:   "jetfleet agents of pool " + pool,
		FilterSubject: n.WorkPoolFilter(pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      0, // inherit the stream's
	}
}

// Ensure creates or updates every stream, bucket and object store; a
// stream already configured as asked is left alone (streamUnchanged).
func Ensure(ctx context.Context, js jetstream.JetStream, n messages.Names, c Config) error {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	for _, sc := range Streams(n, c) {
		if s, err := js.Stream(ctx, sc.Name); err == nil && streamUnchanged(sc, s.CachedInfo().Config) {
			continue
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision: stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range Buckets(n, c) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("provision: bucket %s: %w", kc.Bucket, err)
		}
	}
	for _, oc := range ObjectStores(n, c) {
		if _, err := js.CreateOrUpdateObjectStore(ctx, oc); err != nil {
			return fmt.Errorf("provision: object store %s: %w", oc.Bucket, err)
		}
	}
	return nil
}

// EnsurePool creates or updates pool's work consumer (coordinator side).
func EnsurePool(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config) (jetstream.Consumer, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, n.WorkStream(), WorkConsumer(n, pool, c))
	if err != nil {
		return nil, fmt.Errorf("provision: consumer %s: %w", n.AgentsConsumer(pool), err)
	}
	return cons, nil
}

// WaitPool returns pool's work consumer for an agent: it waits for the work
// stream (created by a coordinator) and creates the consumer with the
// default configuration if no coordinator has yet, never overriding one.
func WaitPool(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config) (jetstream.Consumer, error) {
	b := retry.NewBackoff(waitPoolBackoff, nil, nil)
	for {
		cons, err := js.Consumer(ctx, n.WorkStream(), n.AgentsConsumer(pool))
		if err == nil {
			return cons, nil
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons, err = js.CreateConsumer(ctx, n.WorkStream(), WorkConsumer(n, pool, c))
			if err == nil || errors.Is(err, jetstream.ErrConsumerExists) {
				if err == nil {
					return cons, nil
				}
				continue
			}
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && !isTransient(err) {
			return nil, fmt.Errorf("provision: consumer %s: %w", n.AgentsConsumer(pool), err)
		}
		if err := b.Wait(ctx); err != nil {
			return nil, fmt.Errorf("provision: waiting for stream %s: %w", n.WorkStream(), err)
		}
	}
}

// waitPoolBackoff spaces WaitPool's tries: 100ms doubling to 3.2s.
var waitPoolBackoff = retry.Exponential(100*time.Millisecond, 3200*time.Millisecond)

func isTransient(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}
