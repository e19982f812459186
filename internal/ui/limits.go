package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/limit"
)

// limitView is one limit on the limits page (docs/limits.md): its
// configuration and what the fleet uses of it now.
type limitView struct {
	Name   string
	Inline bool
	Pool   string
	// Rate is the configured rate per second (0: none); Current the rate
	// now, below it while an adaptive limit is cut; Factor is Current /
	// Rate (the AIMD factor, 1 when not cut).
	Rate, Current, Factor float64
	Burst                 int
	Tokens                float64
	Adaptive              bool
	// InFlight are the slots held by unexpired leases, of Concurrency
	// (0: no cap); Holders and Waiting count the agents holding slots and
	// the agents refused one.
	InFlight, Concurrency, Holders, Waiting int
	// Calls, Successes and Overloads are the current and the previous
	// minute's.
	Calls, Successes, Overloads int64
}

// limitsData is the limits page.
type limitsData struct {
	Limits []limitView
	Err    string
}

func (s *Server) pageLimits(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	d := &limitsData{}
	var err error
	if d.Limits, err = s.limits(ctx); err != nil {
		d.Err = err.Error()
	}
	s.render(w, r, http.StatusOK, "limits", &page{Title: "Limits", Nav: "limits", Data: d})
}

// limits reads every record of the limits bucket: named limits first,
// then inline ones, each sorted by name.
func (s *Server) limits(ctx context.Context) ([]limitView, error) {
	kv, err := s.js.KeyValue(ctx, s.names.LimitsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil // no limit was ever set
	}
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	// A limit's own record (a named limit's configuration) and the pools'
	// shares of it (internal/limit, share.go), by limit key.
	confs := map[string]*limit.Record{}
	shares := map[string]map[string]limit.Record{}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue // deleted meanwhile
		}
		var rec limit.Record
		if json.Unmarshal(e.Value(), &rec) != nil {
			continue
		}
		if pool, k, ok := limit.SplitShareKey(key); ok {
			if shares[k] == nil {
				shares[k] = map[string]limit.Record{}
			}
			shares[k][pool] = rec
			continue
		}
		confs[key] = &rec
	}
	all := map[string]bool{}
	for k := range confs {
		all[k] = true
	}
	for k := range shares {
		all[k] = true
	}
	var out []limitView
	for key := range all {
		rec := limit.Combine(confs[key], shares[key], now)
		name, named := limit.KeyName(key)
		st := rec.Stats
		v := limitView{
			Name: name, Inline: !named, Pool: rec.Pool,
			Rate: rec.LimitConfig.Rate.PerSecond(), Current: rec.Rate(), Factor: 1,
			Burst: rec.WithDefaults().Burst, Tokens: rec.TokensAt(now), Adaptive: rec.Adaptive,
			InFlight: rec.InFlight(now), Concurrency: rec.Concurrency,
			Calls: int64(st.Calls + st.PrevCalls), Successes: int64(st.Successes + st.PrevSuccesses), Overloads: int64(st.Overloads + st.PrevOverloads),
		}
		if v.Rate > 0 {
			v.Factor = v.Current / v.Rate
		}
		for _, h := range rec.Holders {
			if h.Until.After(now) && h.Slots > 0 {
				v.Holders++
			}
		}
		for _, until := range rec.Waiters {
			if until.After(now) {
				v.Waiting++
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b limitView) int {
		if a.Inline != b.Inline {
			if a.Inline {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
	// Stopped after its last key, a lister whose watch has ended says so:
	// not a failure.
	if err := keys.Stop(); err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) && !errors.Is(err, nats.ErrBadSubscription) {
		return out, err
	}
	return out, nil
}
