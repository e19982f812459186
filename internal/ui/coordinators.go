package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// coordinatorsWait is how long the dashboard collects the coordinators'
// answers to a micro info request: they answer in milliseconds, and their
// number is not known in advance.
const coordinatorsWait = 250 * time.Millisecond

// coordinatorsTTL is how long a list of coordinators is shown again before
// they are asked anew: the list changes when a coordinator starts or
// stops, and a page view should not wait coordinatorsWait every time.
const coordinatorsTTL = 10 * time.Second

// coordinatorView is one coordinator's answer to $SRV.INFO.jetfleet, as
// `fleetctl version` shows it. Build is empty for a coordinator before
// v0.4.0, which names none.
type coordinatorView struct {
	ID      string
	Version string
	Build   string
}

// coordinatorCache keeps the last list of coordinators for
// coordinatorsTTL. It is safe for concurrent use.
type coordinatorCache struct {
	mu   sync.Mutex
	at   time.Time
	list []coordinatorView
}

// coordinators returns the fleet's coordinators with their builds (their
// micro service info, docs/contract.md §8), from the cache while it is
// fresh.
func (s *Server) coordinators(ctx context.Context) ([]coordinatorView, error) {
	c := &s.coords
	c.mu.Lock()
	defer c.mu.Unlock()
	now := s.cfg.Clock.Now()
	if len(c.list) > 0 && now.Sub(c.at) < coordinatorsTTL && !now.Before(c.at) {
		return c.list, nil
	}
	list, err := s.askCoordinators(ctx)
	// Only a list with someone in it is kept: while none answers (the
	// fleet starting, or every coordinator restarting) each view asks.
	c.list, c.at = list, now
	return list, err
}

// askCoordinators sends one micro info request to every jetfleet
// coordinator and collects the answers of this prefix's coordinators (and
// of those before v0.4.0, which do not name theirs) for coordinatorsWait.
func (s *Server) askCoordinators(ctx context.Context) ([]coordinatorView, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, messages.ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, coordinatorsWait)
	defer cancel()
	var out []coordinatorView
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the wait is over (or the page's context ended)
		}
		var info micro.Info
		if json.Unmarshal(m.Data, &info) != nil {
			continue
		}
		if p, ok := info.Metadata["prefix"]; ok && p != s.names.Prefix {
			continue
		}
		out = append(out, coordinatorView{ID: info.ID, Version: info.Version, Build: info.Metadata["build"]})
	}
	slices.SortFunc(out, func(a, b coordinatorView) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
