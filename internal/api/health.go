package api

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// KeepServing checks every Config.HealthInterval that the coordinator
// reaches the cluster (Config.Probe), stops serving after
// Config.HealthFailures failed checks in a row when another coordinator
// reaches the cluster (othersServing), and serves again after the next
// good check, or as soon as no other coordinator serves, until ctx ends.
// Checks that keep failing as a cut-off server's requests do
// (natsconn.CutOff) move the connection to another server of its URL
// list.
func (s *Server) KeepServing(ctx context.Context) {
	s.healthy.Store(true) // it reached the cluster to start
	go s.answerHealthy(ctx)
	every := s.cfg.HealthInterval
	t := time.NewTicker(every)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := s.cfg.Probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// A full store leaves writes unanswered as a cut-off server does,
		// on every server alike: no reason to move then.
		if s.cfg.StoreFull() == nil && s.cfg.CutOff.ObserveConn(s.cfg.Conn, err) {
			// A server cut off the cluster keeps its clients: leave it.
			s.cfg.Logger.Warn().Err(err).Str("server", s.cfg.Conn.ConnectedUrlRedacted()).Msg("the server seems cut off the cluster; reconnecting to another")
		}
		s.healthy.Store(err == nil)
		s.cfg.Checked()
		if err == nil {
			failures = 0
			if !s.serving() {
				if err := s.Start(); err != nil {
					s.cfg.Logger.Warn().Err(err).Msg("cannot serve the API again; trying at the next check")
					continue
				}
				s.cfg.Logger.Info().Msg("the cluster answers again: serving the API")
			}
			continue
		}
		failures++
		if failures < s.cfg.HealthFailures {
			continue
		}
		if !s.serving() {
			// Stopped for another that served: if it no longer does (it
			// failed its own checks since), none would serve.
			if !s.othersServing(ctx) {
				if err := s.Start(); err == nil {
					s.cfg.Logger.Warn().Int("checks", failures).Msg("cannot reach the cluster, and no other coordinator serves any more: serving again")
				}
			}
			continue
		}
		// Only for another that serves: when no coordinator reaches the
		// cluster (a JetStream meta election, after a partition heals),
		// one that answers "unavailable", or from its runner, is better
		// than none.
		if s.othersServing(ctx) {
			s.stop()
			s.cfg.Logger.Warn().Err(err).Int("checks", failures).Msg("cannot reach the cluster: API no longer served here until it can")
		} else if failures == s.cfg.HealthFailures {
			s.cfg.Logger.Warn().Err(err).Int("checks", failures).Msg("cannot reach the cluster, and no other coordinator serves: serving on")
		}
	}
}

// OthersWait bounds how long othersServing waits for another
// coordinator's answer.
const OthersWait = 500 * time.Millisecond

// healthySubject is where coordinators whose last check reached the
// cluster answer with their holder name (not part of the public API).
func healthySubject(prefix string) string { return prefix + ".api._healthy" }

// answerHealthy answers on healthySubject while the last check passed,
// until ctx ends.
func (s *Server) answerHealthy(ctx context.Context) {
	sub, err := s.cfg.Conn.Subscribe(healthySubject(s.cfg.Prefix), func(m *nats.Msg) {
		if s.healthy.Load() {
			_ = m.Respond([]byte(s.cfg.Holder))
		}
	})
	if err != nil {
		s.cfg.Logger.Warn().Err(err).Msg("cannot answer other coordinators' health questions")
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// othersServing reports whether a coordinator other than this one reaches
// the cluster (its last check passed) where this one's server can see it:
// then it serves, and this one may stop. Two coordinators that fail their
// checks at once (a meta election) both serve on.
func (s *Server) othersServing(ctx context.Context) bool {
	nc := s.cfg.Conn
	inbox := nc.NewInbox()
	answers := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(healthySubject(s.cfg.Prefix), inbox, nil); err != nil {
		return false
	}
	wait := time.NewTimer(OthersWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-wait.C:
			return false
		case m := <-answers:
			if len(m.Data) > 0 && string(m.Data) != s.cfg.Holder {
				return true
			}
		}
	}
}
