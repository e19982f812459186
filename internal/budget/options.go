package budget

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvstate"
)

// DefaultOpTimeout bounds one KV request (read or write). A request in
// flight when a replicated bucket's leader changes gets no answer and
// stalls its claims this long before it is retried. Conflicts and failed
// requests are retried with kvstate's jittered backoffs.
const DefaultOpTimeout = kvstate.DefaultOpTimeout

// Option configures New. Options validate their arguments.
type Option func(*options) error

type options struct {
	log       zerolog.Logger
	reg       prometheus.Registerer
	js        jetstream.JetStream
	opTimeout time.Duration
	watch     bool
	limits    LimitsFunc
	clock     clock.Clock
}

// LimitsFunc returns the limits the coordinator set for a budget key
// ([Key]: the job's record's budget, or the pool's share of it), ok false
// when they are not known yet.
type LimitsFunc func(job string) (total, perItemMax int, ok bool)

// WithLimits makes fn the authority on each job's Total and PerItemMax:
// a record read from the bucket carries fn's values whatever the bucket
// says, so a client that can write the bucket (any agent) cannot raise
// or lower a job's limits, only its spending. Defaults to none: the
// bucket's values.
func WithLimits(fn LimitsFunc) Option {
	return func(o *options) error {
		o.limits = fn
		return nil
	}
}

func defaultOptions() options {
	return options{log: zerolog.Nop(), opTimeout: DefaultOpTimeout, watch: true, clock: clock.Real{}}
}

// WithClock sets the clock that paces the warnings about records whose
// limits are not the job's (TamperWarnInterval). Defaults to the system
// clock.
func WithClock(c clock.Clock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("budget: WithClock: nil clock")
		}
		o.clock = c
		return nil
	}
}

// WithLogger sets the logger; a child with component=budget is used.
// Defaults to zerolog.Nop().
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithRegisterer registers the metrics (jetfleet_retry_budget_*) with reg.
// Several Budgets may share one registry. Defaults to no registration.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) error {
		if reg == nil {
			return errors.New("budget: WithRegisterer: nil registerer")
		}
		o.reg = reg
		return nil
	}
}

// WithJetStream makes the reads behind every compare-and-set go to the
// bucket stream's leader through the $JS.API.STREAM.MSG.GET API, whatever
// the bucket's AllowDirect setting. Recommended for replicated buckets:
// a KV Get uses direct get there, which any replica may answer, possibly a
// lagging one, and a stale read only buys a failed compare-and-set
// (docs/jetstream.md §10). Without it, reads use the KeyValue's Get.
func WithJetStream(js jetstream.JetStream) Option {
	return func(o *options) error {
		if js == nil {
			return errors.New("budget: WithJetStream: nil JetStream")
		}
		o.js = js
		return nil
	}
}

// WithOpTimeout bounds each KV request. Defaults to DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("budget: WithOpTimeout: %v is not positive", d)
		}
		o.opTimeout = d
		return nil
	}
}

// WithWatch turns the bucket watch on (the default) or off. The watch lets
// a process learn, without a read or a write, that other processes have
// moved or exhausted a budget.
func WithWatch(on bool) Option {
	return func(o *options) error { o.watch = on; return nil }
}
