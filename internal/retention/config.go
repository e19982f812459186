package retention

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Jobs is what retention needs of the coordinator's jobs: their records,
// read and written by compare-and-set, the index of finished jobs, and
// what the coordinator still holds of a job.
type Jobs interface {
	// Wait returns once the job index has caught up, or ctx ends.
	Wait(ctx context.Context) error
	// Finished returns the statuses of the finished jobs keep accepts.
	Finished(keep func(*messages.JobStatus) bool) []messages.JobStatus
	// Followed reports whether this coordinator still follows a job: a
	// runner lingers for its late results, or a replay holds it.
	Followed(id string) bool
	// Get returns a job's record and its revision; ErrNoJob when no job
	// has that id.
	Get(ctx context.Context, id string) (*wire.JobRecord, uint64, error)
	// Update writes rec in place of the record at revision rev; ok is
	// false when another write came first.
	Update(ctx context.Context, rec *wire.JobRecord, rev uint64) (newRev uint64, ok bool, err error)
	// Remove deletes a job's record if it is still at revision rev,
	// leaving a marker that expires after markerTTL.
	Remove(ctx context.Context, id string, rev uint64, markerTTL time.Duration) (bool, error)
	// Forget drops what the coordinator remembers of a cleaned job (its
	// budgets).
	Forget(rec *wire.JobRecord)
	// DropPause deletes a job's pause mark, if any.
	DropPause(ctx context.Context, id string)
	// RemoveSpecs deletes a job's spec records from its pools' buckets.
	RemoveSpecs(ctx context.Context, rec *wire.JobRecord) error
}

// Streams looks streams up and purges them by subject.
type Streams interface {
	// Stream returns a handle of the named stream.
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
	// Purge removes stream's messages on subject (a filter); a stream
	// that does not exist has none.
	Purge(ctx context.Context, stream, subject string) error
}

// ErrNoJob is what Jobs.Get returns for an id that names no job.
var ErrNoJob = errors.New("retention: no such job")

// Config is what a Retention is built of. The durations are the
// coordinator's settings of the same names.
type Config struct {
	JetStream jetstream.JetStream
	Names     messages.Names
	Jobs      Jobs
	Streams   Streams
	Clock     clock.Clock
	Logger    zerolog.Logger
	// Cleaned and Pruned count the jobs cleaned and the records deleted;
	// nil counts nothing.
	Cleaned, Pruned prometheus.Counter

	JobRetention     time.Duration
	CleanupInterval  time.Duration
	LateResultWindow time.Duration
	PruneMarkerTTL   time.Duration
}

// Retention runs the retention passes and jobs.prune. It is safe for
// concurrent use.
type Retention struct {
	cfg     Config
	js      jetstream.JetStream
	names   messages.Names
	jobs    Jobs
	streams Streams
	clock   clock.Clock
	log     zerolog.Logger
	cleaned prometheus.Counter
	pruned  prometheus.Counter
}

// New returns the retention of cfg. It does not touch the server until
// it is called.
func New(cfg Config) *Retention {
	c := &Retention{cfg: cfg, js: cfg.JetStream, names: cfg.Names, jobs: cfg.Jobs, streams: cfg.Streams,
		clock: cfg.Clock, log: cfg.Logger, cleaned: cfg.Cleaned, pruned: cfg.Pruned}
	if c.cleaned == nil {
		c.cleaned = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	if c.pruned == nil {
		c.pruned = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	return c
}
