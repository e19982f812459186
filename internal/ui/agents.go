package ui

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// silentAfter is how many presence intervals without a write make an
// agent silent (it may have died; its key expires after a minute).
const silentAfter = 3

// poolView is one pool on the agents page: its work consumer's counts and
// its agents.
type poolView struct {
	Pool string
	// From the consumer's info: pull requests waiting, messages delivered
	// and not acknowledged (running or parked in a delayed retry),
	// messages not yet delivered, redelivered ones.
	Waiting, AckPending, Redelivered int
	Pending                          uint64
	LastActive                       *time.Time
	HasConsumer                      bool
	Agents                           []agentView
	Concurrency                      int
	InFlight                         int64
	// PausedSince is when the pool was paused (fleetctl pool pause); nil
	// while it runs.
	PausedSince *time.Time
}

// agentView is one agent.
type agentView struct {
	messages.AgentPresence
	Status string // live, silent, stopping
	Jobs   []kv
	Load   float64
}

// agentsData is the agents page.
type agentsData struct {
	// Coordinators are the coordinators that answered, with their builds;
	// CoordErr says why they could not be asked.
	Coordinators []coordinatorView
	CoordErr     string
	Pools        []poolView
	Err          string
	LiveErr      string
	Agents       int
	InFlight     int64
}

func (s *Server) pageAgents(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	d := &agentsData{LiveErr: s.hub.sourceErrors()}
	pools := map[string]*poolView{}
	pool := func(name string) *poolView {
		p := pools[name]
		if p == nil {
			p = &poolView{Pool: name}
			pools[name] = p
		}
		return p
	}
	if err := s.consumers(ctx, pool); err != nil {
		d.Err = err.Error()
	}
	if cs, err := s.coordinators(ctx); err != nil {
		d.CoordErr = err.Error()
	} else {
		d.Coordinators = cs
	}
	now := s.cfg.Clock.Now()
	for _, a := range s.hub.agentList() {
		p := pool(a.Pool)
		v := agentView{AgentPresence: a, Status: "live"}
		interval := a.Interval.D()
		if interval <= 0 {
			interval = 5 * time.Second
		}
		switch {
		case a.Stopping:
			v.Status = "stopping"
		case now.Sub(a.LastSeen) > silentAfter*interval:
			v.Status = "silent"
		}
		if a.Concurrency > 0 {
			v.Load = min(float64(a.InFlight)/float64(a.Concurrency), 1)
		}
		v.Jobs = sortedCounts(a.Jobs)
		p.Agents = append(p.Agents, v)
		p.Concurrency += a.Concurrency
		p.InFlight += a.InFlight
		d.Agents++
		d.InFlight += a.InFlight
	}
	for _, p := range pools {
		p.PausedSince = s.poolPausedSince(ctx, p.Pool)
		d.Pools = append(d.Pools, *p)
	}
	slices.SortFunc(d.Pools, func(a, b poolView) int { return strings.Compare(a.Pool, b.Pool) })
	s.render(w, r, http.StatusOK, "agents", &page{Title: "Agents", Nav: "agents", Live: "agents=1", Data: d})
}

// consumers reads the work stream's pool consumers (one request per page
// of consumers, whatever the number of agents).
func (s *Server) consumers(ctx context.Context, pool func(string) *poolView) error {
	stream, err := s.js.Stream(ctx, s.names.WorkStream())
	if err != nil {
		return err
	}
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		name, ok := strings.CutPrefix(info.Name, s.names.AgentsConsumer(""))
		if !ok || messages.ValidToken(name) != nil {
			continue
		}
		p := pool(name)
		p.HasConsumer = true
		p.Waiting, p.AckPending, p.Redelivered, p.Pending = info.NumWaiting, info.NumAckPending, info.NumRedelivered, info.NumPending
		if info.Delivered.Last != nil {
			t := *info.Delivered.Last
			p.LastActive = &t
		}
	}
	if err := lister.Err(); err != nil && err != jetstream.ErrEndOfData {
		return err
	}
	return nil
}
