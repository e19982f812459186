package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// specSource reads job specs from the agent's pool's specs bucket
// (messages.Names.SpecsBucket), which holds what the pool's agents need
// of each job and nothing of its outcome: a job's status, errors and
// counts are in its record in the jobs bucket, which agents do not read
// (docs/security.md, Threat model). The bucket is opened at the first read
// (the coordinator makes it with the pool's consumer). Safe for concurrent
// use.
type specSource struct {
	open   func(ctx context.Context) (recordGetter, error)
	leader leaderGet

	mu sync.Mutex
	kv recordGetter // nil until opened
}

// errNoSpecs: the pool has no specs bucket (a coordinator of an earlier
// version, which kept specs in the job records only).
var errNoSpecs = errors.New("agent: the pool has no specs bucket")

// newSpecSource reads pool's specs bucket; wrap (a test's lagging replica)
// wraps its direct gets when not nil.
func newSpecSource(js jetstream.JetStream, names messages.Names, pool string, wrap func(recordGetter) recordGetter) *specSource {
	return newSpecSourceDenied(js, names, pool, wrap, nil, "")
}

// newSpecSourceDenied is newSpecSource asking first, through denials (nil:
// not asked), whether the agent may read the bucket: role keys of the
// previous release name no specs bucket, and a fleet keeps them until its
// roll ends (docs/deploy.md, "Upgrades"). A refusal reads as errNoSpecs,
// the job records are read instead; it is asked again at the next open,
// since keys re-issued and reloaded may grant the bucket.
func newSpecSourceDenied(js jetstream.JetStream, names messages.Names, pool string, wrap func(recordGetter) recordGetter,
	denials *natsconn.Denials, apiPrefix string) *specSource {
	bucket := names.SpecsBucket(pool)
	return &specSource{
		open: func(ctx context.Context) (recordGetter, error) {
			if denials != nil {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ok := denials.StreamPermitted(pctx, apiPrefix, "KV_"+bucket)
				cancel()
				if !ok {
					return nil, errNoSpecs
				}
			}
			kv, err := js.KeyValue(ctx, bucket)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return nil, errNoSpecs
			}
			if err != nil {
				return nil, err
			}
			var g recordGetter = kv
			if wrap != nil {
				g = wrap(g)
			}
			return g, nil
		},
		leader: kvleader.New(js, bucket).Get,
	}
}

// read returns job id's spec record: a direct get, and when that finds
// none, the stream leader's answer. ok=false when the leader has none.
func (s *specSource) read(ctx context.Context, id string) (rec *wire.SpecRecord, ok bool, err error) {
	s.mu.Lock()
	kv := s.kv
	s.mu.Unlock()
	if kv == nil {
		if kv, err = s.open(ctx); err != nil {
			return nil, false, err
		}
		s.mu.Lock()
		s.kv = kv
		s.mu.Unlock()
	}
	e, err := kv.Get(ctx, id)
	switch {
	case err == nil:
		if rec, err := decodeSpec(id, e.Value()); err != nil || rec.Spec != nil {
			return rec, err == nil, err
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, false, err
	}
	data, _, err := s.leader(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("agent: spec of job %s from the stream leader: %w", id, err)
	}
	if data == nil {
		return nil, false, nil
	}
	rec, err = decodeSpec(id, data)
	if err != nil || rec.Spec == nil {
		return nil, false, err
	}
	return rec, true, nil
}

func decodeSpec(id string, data []byte) (*wire.SpecRecord, error) {
	var rec wire.SpecRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("agent: spec of job %s: %w", id, err)
	}
	return &rec, nil
}

// legacyRecords reads job records of the jobs bucket, where a coordinator
// of an earlier version kept the specs (docs/contract.md §8: a record of
// the previous layout is still read), while the agent's permissions allow
// it: the permissions of this release do not, and the server refuses the
// first read at once (natsconn.Denials), after which none is tried.
type legacyRecords struct {
	js        jetstream.JetStream
	names     messages.Names
	apiPrefix string // the JetStream API's subject prefix (natsconn.APIPrefix)
	denials   *natsconn.Denials
	wrap      func(recordGetter) recordGetter

	mu     sync.Mutex
	denied bool
	kv     recordGetter
	leader leaderGet
}

// open returns the jobs bucket's readers, or ok=false when the agent may
// not read it (or it does not exist).
func (l *legacyRecords) open(ctx context.Context) (kv recordGetter, leader leaderGet, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.denied {
		return nil, nil, false, nil
	}
	if l.kv != nil {
		return l.kv, l.leader, true, nil
	}
	if l.denials != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.denials.Request(pctx, l.apiPrefix+"STREAM.INFO.KV_"+l.names.JobsBucket(), nil)
		cancel()
		if errors.Is(err, natsconn.ErrDenied) {
			l.denied = true
			return nil, nil, false, nil
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("agent: asking for the jobs bucket: %w", err)
		}
	}
	b, err := l.js.KeyValue(ctx, l.names.JobsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	l.kv = b
	if l.wrap != nil {
		l.kv = l.wrap(b)
	}
	l.leader = kvleader.New(l.js, l.names.JobsBucket()).Get
	return l.kv, l.leader, true, nil
}

// loaded is what the job cache takes from a spec record or a job record.
type loaded struct {
	spec   *messages.JobSpec
	routes map[string]string
	budget messages.BudgetStatus
	shares map[string]int
	items  int64 // the job's item count (${item_total}); 0 until a setup has run
	// setupCaptures are what the job's setup captured (unset until its
	// map phase starts).
	setupCaptures map[string]*wire.Capture
	// started reports whether the job's map phase runs after a map_ended
	// heard at the given time (zero: its time is not known) was sent: that
	// event was of an earlier job of the same id.
	started func(endedAt time.Time) bool
}

func loadedSpec(rec *wire.SpecRecord) *loaded {
	return &loaded{
		spec: rec.Spec, routes: rec.Routes, shares: rec.BudgetShares, items: rec.Items,
		setupCaptures: rec.SetupCaptures,
		budget:        messages.BudgetStatus{Total: rec.BudgetTotal, PerItemMax: rec.BudgetPerItemMax},
		started: func(endedAt time.Time) bool {
			return !endedAt.IsZero() && rec.AcceptedAt.After(endedAt)
		},
	}
}

func loadedRecord(rec *wire.JobRecord) *loaded {
	running := rec.Status.MapReason == "" && !messages.TerminalState(rec.Status.State)
	return &loaded{
		spec: rec.Spec, routes: rec.Routes, shares: rec.BudgetShares, budget: rec.Status.Budget,
		items: rec.Status.Items, setupCaptures: rec.SetupCaptures,
		started: func(time.Time) bool { return running },
	}
}

// mapEndedAt is a map_ended event's time (zero if it has none).
func mapEndedAt(body []byte) time.Time {
	var ev messages.Event
	if json.Unmarshal(body, &ev) != nil {
		return time.Time{}
	}
	return ev.Time
}
