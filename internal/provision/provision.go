// Package provision creates and updates jetfleet's NATS resources (docs/contract.md §2):
// streams, the per-pool work consumers, KV buckets and the input object store.
// Every call is idempotent, so coordinators call Ensure at every start.
package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
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
	// DefaultDLQMaxBytes is each pool's dead-letter quota. JetStream
	// reserves a stream's MaxBytes of every node that stores it, up front
	// (docs/dlq.md, "Each pool's quota is reserved"): at 16 MiB the 100
	// pools that --max-pools allows reserve 1.6 GB of each node's
	// max_file_store (deploy's 8 GB).
	DefaultDLQMaxBytes = 16 << 20
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

// Config sizes the resources. The zero value is usable: WithDefaults fills
// it. Its fields are pkg/coordinator's Provision's, documented there for
// users (Config.Provision): the coordinator converts one into the other
// with a struct conversion, which compiles only while both have the same
// fields, of the same types, in the same order. Add a field to both.
type Config struct {
	Replicas      int
	AckWait       time.Duration
	MaxDeliver    int
	MaxAckPending int
	WorkMaxMsgs   int64
	WorkMaxBytes  int64
	Retention     time.Duration
	DLQMaxAge     time.Duration
	DLQMaxBytes   int64
	DLQMaxMsgs    int64
	UploadsTTL    time.Duration
	Memory        bool
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
		{
			Name: n.WorkStream(), Subjects: []string{n.WorkFilter()},
			Retention: jetstream.WorkQueuePolicy, Storage: st, Replicas: c.Replicas,
			Discard: jetstream.DiscardNew, MaxMsgs: c.WorkMaxMsgs, MaxBytes: c.WorkMaxBytes,
			Duplicates:  DefaultWorkDupWindow,
			Description: "jetfleet work items",
			// Parked items come back when due: each pool's park stream
			// (ParkStream) is a source, whose fired copies land on the
			// pool's work subject. Ensure and EnsurePool set the sources;
			// a full work stream refuses them as it refuses the
			// coordinator, and the server retries the source from the
			// refused one.
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
			// No limit on bytes or messages: an agent's entries come from
			// its pool's dead-letter stream (PoolDLQStream, a source), which
			// holds the pool's quota, so that one pool cannot fill the room
			// of another; a limit here would be shared again. The rest are
			// the coordinator's (the DLQ mover's), one per work item at most.
			Name: n.DLQStream(), Subjects: []string{n.DLQFilter()},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			Discard: jetstream.DiscardNew, MaxAge: c.DLQMaxAge, MaxBytes: -1, MaxMsgs: -1,
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
			Name: n.AdvisoriesStream(), Subjects: []string{wire.MaxDeliveriesAdvisory(n, "*")},
			Retention: jetstream.LimitsPolicy, Storage: st, Replicas: c.Replicas,
			MaxAge:      c.Retention,
			Description: "jetfleet MAX_DELIVERIES advisories of the work stream",
		},
	}
}

// ParkStream is the configuration of pool's park stream (docs/retries.md
// "Parking"): message schedules, which the work stream cannot hold
// (schedules refuse DiscardNew, the work stream's backpressure).
// WorkQueue: a schedule is removed when it fires, and the fired copy once
// the work stream has sourced it. No limits: a parked item is never
// discarded. Schedules need AllowRollup, so the pool's agents, which may
// publish schedules, may also roll the stream up: one stream per pool
// keeps that, and every schedule's target, inside the pool.
func ParkStream(n messages.Names, pool string, c Config) jetstream.StreamConfig {
	c = c.WithDefaults()
	return jetstream.StreamConfig{
		Name: n.ParkStream(pool), Subjects: []string{wire.ParkFilter(n, pool)},
		Retention: jetstream.WorkQueuePolicy, Storage: c.storage(), Replicas: c.Replicas,
		AllowMsgSchedules: true, AllowRollup: true,
		Duplicates:  DefaultWorkDupWindow,
		Description: "jetfleet parked retries of pool " + pool + " (message schedules)",
	}
}

// PoolDLQStream is the configuration of pool's dead-letter stream
// (wire.PoolDLQStream): the entries its agents write, within the pool's
// quota (DLQMaxBytes, DLQMaxMsgs; DiscardNew: at the quota an agent's
// entry is refused and the agent keeps the item). The DLQ stream sources
// it; an entry deleted there (replayed, purged) is deleted here too.
func PoolDLQStream(n messages.Names, pool string, c Config) jetstream.StreamConfig {
	c = c.WithDefaults()
	return jetstream.StreamConfig{
		Name: wire.PoolDLQStream(n, pool), Subjects: []string{wire.PoolDLQFilter(n, pool)},
		Retention: jetstream.LimitsPolicy, Storage: c.storage(), Replicas: c.Replicas,
		Discard: jetstream.DiscardNew, MaxAge: c.DLQMaxAge, MaxBytes: c.DLQMaxBytes, MaxMsgs: c.DLQMaxMsgs,
		Duplicates:  DefaultWorkDupWindow,
		Description: "jetfleet dead letters of pool " + pool + " (its quota; sourced into the DLQ stream)",
	}
}

// dlqSource is the DLQ stream's source of pool's dead-letter stream.
func dlqSource(n messages.Names, pool string) *jetstream.StreamSource {
	src, dest := wire.PoolDLQTransform(n, pool)
	return &jetstream.StreamSource{
		Name:              wire.PoolDLQStream(n, pool),
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: src, Destination: dest}},
	}
}

// parkSource is the work stream's source of pool's parked items that are due.
func parkSource(n messages.Names, pool string) *jetstream.StreamSource {
	src, dest := wire.ParkDueTransform(n, pool)
	return &jetstream.StreamSource{
		Name:              n.ParkStream(pool),
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: src, Destination: dest}},
	}
}

// legacyParkSource is the work stream's source of the park stream that
// earlier versions shared by every pool.
func legacyParkSource(n messages.Names) *jetstream.StreamSource {
	src, dest := wire.LegacyParkDueTransform(n)
	return &jetstream.StreamSource{
		Name:              wire.LegacyParkStream(n),
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
		{Bucket: n.SchedulesBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet schedules: timing, job spec, runs and skipped ticks"},
		{Bucket: n.PauseBucket(), History: 1, Storage: st, Replicas: c.Replicas, Description: "jetfleet paused jobs and pools"},
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

// Rollups: a message with the header Nats-Rollup purges its subject
// ("sub") or the whole stream ("all"), and the server cannot tell which
// clients may send one. Every bucket and object store that a client other
// than the coordinator writes therefore refuses rollups (AllowRollup
// false). The purges jetfleet needs go through the stream purge API, which
// the permissions grant to the coordinator only. Kept: the jobs bucket
// (only the coordinator writes it; a deleted record's purge marker with a
// TTL is a rollup) and the inputs object store (only the coordinator
// writes it; nats.go writes an object's meta as a rollup).
func rollups(n messages.Names, bucket string) bool {
	return bucket == n.JobsBucket() || bucket == n.InputsBucket()
}

// BucketStream is the configuration of the stream behind KV bucket kc:
// what nats.go's CreateKeyValue makes, and AllowRollup only where
// rollups allow it.
func BucketStream(n messages.Names, kc jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(max(kc.History, 1))
	dup := 2 * time.Minute
	if kc.TTL > 0 && kc.TTL < dup {
		dup = kc.TTL
	}
	sc := jetstream.StreamConfig{
		Name:              "KV_" + kc.Bucket,
		Description:       kc.Description,
		Subjects:          []string{"$KV." + kc.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            kc.TTL,
		MaxMsgSize:        -1,
		Storage:           kc.Storage,
		Replicas:          max(kc.Replicas, 1),
		AllowRollup:       rollups(n, kc.Bucket),
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
	}
	if kc.LimitMarkerTTL != 0 {
		// Limit markers are rollups for the server: it would turn
		// AllowRollup on by itself.
		sc.AllowMsgTTL, sc.SubjectDeleteMarkerTTL, sc.AllowRollup = true, kc.LimitMarkerTTL, true
	}
	return sc
}

// ObjectStoreStream is the configuration of the stream behind object
// store oc: what nats.go's CreateObjectStore makes, AllowRollup only
// where rollups allow it, and no direct gets. A store without rollups
// cannot be written by nats.go's Put or Delete: internal/upload writes and
// removes its objects. Objects are read right after they are written (an
// upload by the coordinator that accepts it, an input as the job is
// expanded), and a direct get may be answered by a replica that has not
// stored the write yet: on R3 that turned a fresh upload into "no object"
// (docs/jetstream.md, direct gets). Without direct gets every read goes to
// the stream's leader.
func ObjectStoreStream(n messages.Names, oc jetstream.ObjectStoreConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        "OBJ_" + oc.Bucket,
		Description: oc.Description,
		Subjects:    []string{"$O." + oc.Bucket + ".C.>", "$O." + oc.Bucket + ".M.>"},
		MaxAge:      oc.TTL,
		MaxBytes:    -1,
		Storage:     oc.Storage,
		Replicas:    max(oc.Replicas, 1),
		Discard:     jetstream.DiscardNew,
		AllowRollup: rollups(n, oc.Bucket),
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
		FilterSubject: wire.WorkPoolFilter(n, pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      0, // inherit the stream's
	}
}

// Ensure creates or updates every stream, bucket and object store; a
// stream already configured as asked is left alone (streamUnchanged). It
// turns rollups off where rollups says, also in buckets and object stores
// made by an earlier version, and keeps the work stream's sources: every
// pool's park stream (EnsurePool adds a pool's), and the single park
// stream of earlier versions while it exists.
func Ensure(ctx context.Context, js jetstream.JetStream, n messages.Names, c Config) error {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	var want []jetstream.StreamConfig
	for _, sc := range Streams(n, c) {
		if sc.Name == n.WorkStream() {
			srcs, err := workSources(ctx, js, n)
			if err != nil {
				return fmt.Errorf("provision: stream %s: %w", sc.Name, err)
			}
			sc.Sources = srcs
		}
		if sc.Name == n.DLQStream() {
			srcs, err := dlqSources(ctx, js, n)
			if err != nil {
				return fmt.Errorf("provision: stream %s: %w", sc.Name, err)
			}
			sc.Sources = srcs
		}
		want = append(want, sc)
	}
	for _, kc := range Buckets(n, c) {
		want = append(want, BucketStream(n, kc))
	}
	for _, oc := range ObjectStores(n, c) {
		want = append(want, ObjectStoreStream(n, oc))
	}
	for _, sc := range want {
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	return nil
}

// ensureStream creates or updates a stream unless it is configured as asked.
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, sc.Name)
	if err == nil {
		if streamUnchanged(sc, s.CachedInfo().Config) {
			return nil
		}
		// An update (a create has no consumers beside it).
		defer lockStream(s.CachedInfo())()
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("provision: stream %s: %w", sc.Name, err)
	}
	return nil
}

// workSources are the work stream's sources: every pool's park stream that
// exists, the earlier versions' shared one if it exists, and whatever
// park source the work stream already has (a pool another coordinator
// added meanwhile).
func workSources(ctx context.Context, js jetstream.JetStream, n messages.Names) ([]*jetstream.StreamSource, error) {
	var srcs []*jetstream.StreamSource
	have := map[string]bool{}
	add := func(s *jetstream.StreamSource) {
		if !have[s.Name] {
			have[s.Name] = true
			srcs = append(srcs, s)
		}
	}
	if _, err := js.Stream(ctx, wire.LegacyParkStream(n)); err == nil {
		add(legacyParkSource(n))
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(wire.ParkStreamsFilter(n)))
	for name := range names.Name() {
		if pool, ok := strings.CutPrefix(name, n.ParkStream("")); ok && messages.ValidPool(pool) == nil {
			add(parkSource(n, pool))
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, err
	}
	if s, err := js.Stream(ctx, n.WorkStream()); err == nil {
		for _, src := range s.CachedInfo().Config.Sources {
			add(src)
		}
	}
	slices.SortFunc(srcs, func(a, b *jetstream.StreamSource) int { return strings.Compare(a.Name, b.Name) })
	return srcs, nil
}

// EnsureDLQ configures the DLQ stream as Ensure does, with every pool's
// dead-letter stream as a source, and leaves it alone when it is so
// already. The leading coordinator calls it at every DLQ monitor tick: a
// coordinator of the previous release started beside this one sets the
// DLQ stream to its own configuration (no sources, a byte limit), and
// the pools' dead letters are sourced again from where they stopped
// (docs/contract.md §8).
func EnsureDLQ(ctx context.Context, js jetstream.JetStream, n messages.Names, c Config) error {
	c = c.WithDefaults()
	for _, sc := range Streams(n, c) {
		if sc.Name != n.DLQStream() {
			continue
		}
		srcs, err := dlqSources(ctx, js, n)
		if err != nil {
			return fmt.Errorf("provision: stream %s: %w", sc.Name, err)
		}
		sc.Sources = srcs
		return ensureStream(ctx, js, sc)
	}
	return nil
}

// dlqSources are the DLQ stream's sources: every pool's dead-letter
// stream that exists, and whatever source the DLQ stream already has.
func dlqSources(ctx context.Context, js jetstream.JetStream, n messages.Names) ([]*jetstream.StreamSource, error) {
	var srcs []*jetstream.StreamSource
	have := map[string]bool{}
	add := func(s *jetstream.StreamSource) {
		if !have[s.Name] {
			have[s.Name] = true
			srcs = append(srcs, s)
		}
	}
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(wire.PoolDLQStreamsFilter(n)))
	for name := range names.Name() {
		if pool, ok := strings.CutPrefix(name, wire.PoolDLQStreamPrefix(n)); ok && messages.ValidPool(pool) == nil {
			add(dlqSource(n, pool))
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, err
	}
	if s, err := js.Stream(ctx, n.DLQStream()); err == nil {
		for _, src := range s.CachedInfo().Config.Sources {
			add(src)
		}
	}
	slices.SortFunc(srcs, func(a, b *jetstream.StreamSource) int { return strings.Compare(a.Name, b.Name) })
	return srcs, nil
}

// ErrParkStream wraps EnsurePool's failure to provide the pool's park
// stream, reduce store, dead-letter stream or specs bucket: the pool's
// agents then wait in delayed naks instead of parking or dead-lettering,
// and its jobs' reduce steps cannot start (the coordinator makes the specs
// bucket again before it runs a job of the pool).
var ErrParkStream = errors.New("provision: park stream or reduce store")

// ReduceStore is the configuration of pool's reduce inputs object store
// (messages.Names.ReduceBucket). Only the coordinator writes it.
func ReduceStore(n messages.Names, pool string, c Config) jetstream.ObjectStoreConfig {
	c = c.WithDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket: n.ReduceBucket(pool), Storage: c.storage(), Replicas: c.Replicas,
		Description: "jetfleet map results of pool " + pool + "'s jobs, for their reduce steps (coordinator-written)",
	}
}

// EnsurePool creates or updates pool's work consumer, park stream, reduce
// store, dead-letter stream and specs bucket, and makes the park stream a
// source of the work stream and the dead-letter stream one of the DLQ
// stream (coordinator side).
// The consumer is returned even when the park stream fails (an error
// wrapping ErrParkStream).
func EnsurePool(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config) (jetstream.Consumer, error) {
	return EnsurePoolPermitted(ctx, js, n, pool, c, nil)
}

// EnsurePoolPermitted is EnsurePool skipping the pool's dead-letter stream
// and specs bucket when may (nil: always) says the coordinator may not use
// them: role keys issued by the previous release's `fleetctl auth init`
// name neither, and a fleet keeps those keys until its roll ends
// (docs/deploy.md, "Upgrades"). The pool's agents then dead-letter into
// the DLQ stream and read the job records, as with a coordinator of the
// previous release.
func EnsurePoolPermitted(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config, may func(ctx context.Context, stream string) bool) (jetstream.Consumer, error) {
	if may == nil {
		may = func(context.Context, string) bool { return true }
	}
	unlock := LockStream(ctx, js, n.WorkStream())
	cons, err := js.CreateOrUpdateConsumer(ctx, n.WorkStream(), WorkConsumer(n, pool, c))
	unlock()
	if err != nil {
		return nil, fmt.Errorf("provision: consumer %s: %w", n.AgentsConsumer(pool), err)
	}
	if err := ensurePark(ctx, js, n, pool, c); err != nil {
		return cons, fmt.Errorf("%w %s: %w", ErrParkStream, n.ParkStream(pool), err)
	}
	// A dead-letter stream the servers cannot reserve room for
	// (ErrDLQReservation) leaves the pool's agents dead-lettering into the
	// DLQ stream itself; the reduce store and the specs bucket, which
	// reserve nothing, are made all the same.
	var dlqErr error
	if may(ctx, wire.PoolDLQStream(n, pool)) {
		if err := ensureStream(ctx, js, PoolDLQStream(n, pool, c)); err != nil {
			dlqErr = fmt.Errorf("%w %s: %w", ErrParkStream, wire.PoolDLQStream(n, pool), reservationErr(ctx, js, pool, c, err))
			if !errors.Is(dlqErr, ErrDLQReservation) {
				return cons, dlqErr
			}
		} else if err := ensureSource(ctx, js, n.DLQStream(), dlqSource(n, pool)); err != nil {
			return cons, fmt.Errorf("%w %s: %w", ErrParkStream, wire.PoolDLQStream(n, pool), err)
		}
	}
	// The coordinator writes the reduce store with nats.go's Put, which
	// needs rollups.
	reduce := ObjectStoreStream(n, ReduceStore(n, pool, c))
	reduce.AllowRollup = true
	if err := ensureStream(ctx, js, reduce); err != nil {
		return cons, errors.Join(dlqErr, fmt.Errorf("%w %s: %w", ErrParkStream, n.ReduceBucket(pool), err))
	}
	if !may(ctx, "KV_"+n.SpecsBucket(pool)) {
		return cons, dlqErr
	}
	if _, err := EnsureSpecs(ctx, js, n, pool, c); err != nil {
		return cons, errors.Join(dlqErr, fmt.Errorf("%w %s: %w", ErrParkStream, n.SpecsBucket(pool), err))
	}
	return cons, dlqErr
}

// ensurePark creates pool's park stream and adds it to the work stream's
// sources, checking afterwards that a concurrent update did not drop it.
func ensurePark(ctx context.Context, js jetstream.JetStream, n messages.Names, pool string, c Config) error {
	if err := ensureStream(ctx, js, ParkStream(n, pool, c)); err != nil {
		return err
	}
	return ensureSource(ctx, js, n.WorkStream(), parkSource(n, pool))
}

// ensureSource adds src to stream's sources, checking afterwards that a
// concurrent update did not drop it.
func ensureSource(ctx context.Context, js jetstream.JetStream, stream string, src *jetstream.StreamSource) error {
	b := retry.NewBackoff(waitPoolBackoff, nil, nil)
	for try := range 5 {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		if slices.ContainsFunc(cfg.Sources, func(have *jetstream.StreamSource) bool { return have.Name == src.Name }) {
			return nil
		}
		if try > 0 {
			if err := b.Wait(ctx); err != nil {
				return err
			}
		}
		cfg.Sources = append(cfg.Sources, src)
		unlock := lockStream(s.CachedInfo())
		_, err = js.UpdateStream(ctx, cfg)
		unlock()
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("the stream %s does not keep the source %s", stream, src.Name)
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
			unlock := LockStream(ctx, js, n.WorkStream())
			cons, err = js.CreateConsumer(ctx, n.WorkStream(), WorkConsumer(n, pool, c))
			unlock()
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
