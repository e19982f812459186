package poolset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// New returns the set of cfg's pools; it asks the server nothing until
// used.
func New(cfg Config) *Set {
	return &Set{js: cfg.JetStream, names: cfg.Names, denials: cfg.Denials, streams: cfg.Streams,
		prov: cfg.Provision, configured: cfg.Configured, maxPools: cfg.MaxPools}
}

// Config is what a Set needs: the connection's JetStream and the
// denials it watches, the prefix's names, the stream handles, the
// provisioning settings, and the pools the operator configured.
type Config struct {
	JetStream jetstream.JetStream
	Names     messages.Names
	Denials   *natsconn.Denials
	Streams   Streams
	Provision provision.Config
	// Configured are the pools a job may always name (the coordinator's
	// Config.Pools); MaxPools bounds the work stream's pools (negative:
	// the configured ones only).
	Configured []string
	MaxPools   int
}

// Streams gives handles of the named streams.
type Streams interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// Set knows the work stream's pools. Safe for concurrent use.
type Set struct {
	js         jetstream.JetStream
	names      messages.Names
	denials    *natsconn.Denials
	streams    Streams
	prov       provision.Config
	configured []string
	maxPools   int

	mu sync.Mutex
	// known holds the pools seen on the server or ensured, with when.
	known map[string]time.Time
	// permitted remembers, per pool, whether the coordinator's permissions
	// cover the pool (permitted); bounded by maxPermitted.
	permitted map[string]bool
}

// maxPermitted bounds Set.permitted: past it the answers are asked
// again.
const maxPermitted = 4096

// poolsFresh is how long a pool's consumer, once ensured, is taken to be
// there: accepting a job does not update it every time.
const poolsFresh = time.Minute

// Check refuses a pool the job may not use: one not Configured when
// MaxPools is negative, or a new one when the work stream already has
// MaxPools pools. A nil problem means the pool may be used.
func (p *Set) Check(ctx context.Context, pool string) (*messages.FieldError, error) {
	if slices.Contains(p.configured, pool) {
		return nil, nil
	}
	if ok, err := p.permittedPool(ctx, pool); err != nil {
		return nil, err
	} else if !ok {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q is not provisioned: the coordinator's NATS permissions do not cover its park stream %s (fleetctl auth init --pools lists the fleet's pools)",
			pool, p.names.ParkStream(pool))}, nil
	}
	if p.maxPools < 0 {
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q is not one of the configured pools (%s); the coordinator accepts no other (--max-pools -1)", pool, strings.Join(p.configured, ", "))}, nil
	}
	p.mu.Lock()
	_, ok := p.known[pool]
	p.mu.Unlock()
	if ok {
		return nil, nil
	}
	pools, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	if slices.Contains(pools, pool) {
		return nil, nil
	}
	if len(pools) >= p.maxPools {
		shown := pools
		if len(shown) > 10 {
			shown = shown[:10]
		}
		return &messages.FieldError{Field: "pool", Message: fmt.Sprintf(
			"pool %q would be a new pool; the work stream has %d already (%s…), the limit is %d (--max-pools): use an existing pool",
			pool, len(pools), strings.Join(shown, ", "), p.maxPools)}, nil
	}
	return nil, nil
}

// permittedPool reports whether the coordinator may provision pool: a
// fleet secured by fleetctl auth init grants the coordinator the park
// stream of each pool it names and no other (docs/security.md). It asks
// the server for the park stream's info once per pool; the server refuses
// an unprovisioned pool's at once (natsconn.Denials), so a submission
// naming one is refused without waiting for a timeout.
func (p *Set) permittedPool(ctx context.Context, pool string) (bool, error) {
	p.mu.Lock()
	ok, asked := p.permitted[pool]
	p.mu.Unlock()
	if asked {
		return ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, poolProbeTimeout)
	defer cancel()
	_, err := p.denials.Request(ctx, apiPrefix(p.js)+"STREAM.INFO."+p.names.ParkStream(pool), nil)
	switch {
	case errors.Is(err, natsconn.ErrDenied):
		ok = false
	case err != nil:
		return false, fmt.Errorf("asking for pool %s's park stream: %w", pool, err)
	default:
		ok = true // its info, or "stream not found": the coordinator may create it
	}
	p.mu.Lock()
	if p.permitted == nil || len(p.permitted) >= maxPermitted {
		p.permitted = map[string]bool{}
	}
	p.permitted[pool] = ok
	p.mu.Unlock()
	return ok, nil
}

// MayUse reports whether the coordinator's permissions name stream: the
// server refuses the stream's info at once when they do not
// (natsconn.Denials). Role keys of the previous release's `fleetctl auth
// init` name no pool dead-letter stream and no specs bucket; a fleet keeps
// them until its roll ends (docs/deploy.md, "Upgrades"). Not remembered:
// keys re-issued and reloaded grant them later. Any answer but a refusal
// (the info, "not found", a timeout) counts as permitted, and the caller's
// own request then says what it is.
func (p *Set) MayUse(ctx context.Context, stream string) bool {
	ctx, cancel := context.WithTimeout(ctx, poolProbeTimeout)
	defer cancel()
	return p.denials.StreamPermitted(ctx, apiPrefix(p.js), stream)
}

// poolProbeTimeout bounds permittedPool's request when the server neither
// answers nor refuses it (a server cut off its cluster).
const poolProbeTimeout = 10 * time.Second

// apiPrefix is the subject prefix of js's JetStream API requests: its
// domain's, its own prefix, or the default.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// List reads the work stream's pools from its consumers' names.
func (p *Set) List(ctx context.Context) ([]string, error) {
	s, err := p.streams.Stream(ctx, p.names.WorkStream())
	if err != nil {
		return nil, err
	}
	prefix := p.names.AgentsConsumer("")
	lister := s.ConsumerNames(ctx)
	var pools []string
	for name := range lister.Name() {
		if pool, ok := strings.CutPrefix(name, prefix); ok {
			pools = append(pools, pool)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing the work stream's pools: %w", err)
	}
	sort.Strings(pools)
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string]time.Time{}
	}
	for _, pool := range pools {
		if _, ok := p.known[pool]; !ok {
			p.known[pool] = time.Time{} // seen, not ensured
		}
	}
	p.mu.Unlock()
	return pools, nil
}

// Ensure creates or updates pool's work consumer, unless this coordinator
// did within poolsFresh.
func (p *Set) Ensure(ctx context.Context, pool string) error {
	p.mu.Lock()
	at, ok := p.known[pool]
	p.mu.Unlock()
	if ok && time.Since(at) < poolsFresh {
		return nil
	}
	if _, err := provision.EnsurePoolPermitted(ctx, p.js, p.names, pool, p.prov, p.MayUse); err != nil {
		return err
	}
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string]time.Time{}
	}
	p.known[pool] = time.Now()
	p.mu.Unlock()
	return nil
}

// Known returns the pools this set has seen on the server or ensured,
// in no order.
func (p *Set) Known() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.known))
	for pool := range p.known {
		out = append(out, pool)
	}
	return out
}
