package scheduler

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Jobs is what the scheduler needs of the coordinator's jobs.
type Jobs interface {
	// Submit submits a job as jobs.submit does (spec is its JSON); an
	// error reply of code internal is tried again later, any other is
	// the run's error.
	Submit(ctx context.Context, spec []byte) *messages.APIError
	// CheckSpec returns the problems jobs.submit finds in a job's spec,
	// each with its field, and the spec when it parses.
	CheckSpec(spec json.RawMessage) (*messages.JobSpec, []messages.FieldError)
	// JobState returns a job's state; ErrNoJob when there is no job of
	// that id.
	JobState(ctx context.Context, id string) (string, error)
}

// ErrNoJob is what Jobs.JobState returns for an id that names no job.
var ErrNoJob = errors.New("scheduler: no such job")

// Config is what a Scheduler is built of.
type Config struct {
	// JetStream reaches the schedules bucket, Names.SchedulesBucket().
	JetStream jetstream.JetStream
	Names     messages.Names
	Jobs      Jobs
	Clock     clock.Clock
	Logger    zerolog.Logger
	// MaxPerPool bounds the schedules whose jobs run on one pool.
	MaxPerPool int
}

// Scheduler serves the schedules.* endpoints and, in Run, fires the
// schedules' ticks. It is safe for concurrent use.
type Scheduler struct {
	js         jetstream.JetStream
	names      messages.Names
	jobs       Jobs
	clock      clock.Clock
	log        zerolog.Logger
	maxPerPool int
}

// New returns a scheduler of cfg. It does not touch the server until it
// is called.
func New(cfg Config) *Scheduler {
	return &Scheduler{js: cfg.JetStream, names: cfg.Names, jobs: cfg.Jobs, clock: cfg.Clock,
		log: cfg.Logger, maxPerPool: cfg.MaxPerPool}
}

var (
	decodeRequest = endpoint.Decode
	apiErr        = endpoint.Err
)
