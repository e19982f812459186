package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// endpointFunc answers one API request.
type endpointFunc = endpoint.Func

// allEndpoints are also served on messages.Names.APIAllSubject, where every
// serving coordinator answers (Client's retries of a read ask there).
var allEndpoints = []string{messages.EndpointJobsStatus}

// readEndpoints answer from memory or with a few small reads: they get
// Config.APIDeadline, the others Config.APIWriteDeadline. The DLQ's
// list, get and stats are not among them: they scan dead letters of up to
// max_payload each, which takes seconds on a busy server.
var readEndpoints = map[string]bool{
	messages.EndpointJobsStatus: true, messages.EndpointJobsList: true,
	messages.EndpointDLQReplays: true,
}

// apiServer serves the jetfleet micro service while the coordinator
// reaches the cluster. Each request runs on a goroutine of its own (at most
// Config.APIConcurrency at once; more are answered "unavailable" at once)
// with a deadline, so that one slow read never holds up the requests
// behind it on the subscription. A coordinator that cannot reach the
// cluster (a node cut off, a server that lost JetStream) stops serving:
// its queue-group subscriptions go, and requests reach a coordinator that
// can answer instead of waiting on this one. Safe for concurrent use.
type apiServer struct {
	c     *Coordinator
	ctx   context.Context // the coordinator's; ends every request
	slots chan struct{}

	healthy atomic.Bool // the last check reached the cluster

	mu      sync.Mutex
	svc     micro.Service        // nil while not serving
	all     []*nats.Subscription // the allEndpoints' subjects, while serving
	closed  bool
	running sync.WaitGroup // handlers in flight
}

func newAPIServer(ctx context.Context, c *Coordinator) *apiServer {
	return &apiServer{c: c, ctx: ctx, slots: make(chan struct{}, c.cfg.APIConcurrency)}
}

// start serves the API unless it is served already.
func (s *apiServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil || s.closed {
		return nil
	}
	svc, err := s.c.serveAPI(s.handler)
	if err != nil {
		return err
	}
	endpoints := map[string]endpointFunc{messages.EndpointJobsStatus: s.c.apiStatus}
	for _, name := range allEndpoints {
		h := s.serve(name, endpoints[name])
		sub, err := s.c.nc.Subscribe(s.c.names.APIAllSubject(name), func(m *nats.Msg) { h(m.Data, m.Header, m.Reply) })
		if err != nil {
			s.unsubscribeAll()
			_ = svc.Stop()
			return fmt.Errorf("coordinator: serving %s: %w", s.c.names.APIAllSubject(name), err)
		}
		s.all = append(s.all, sub)
	}
	s.svc = svc
	return nil
}

// unsubscribeAll drops the allEndpoints' subscriptions (s.mu held).
func (s *apiServer) unsubscribeAll() {
	for _, sub := range s.all {
		_ = sub.Unsubscribe()
	}
	s.all = nil
}

// stop stops serving; requests in flight still get their answers.
func (s *apiServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil {
		_ = s.svc.Stop()
		s.svc = nil
	}
	s.unsubscribeAll()
}

// serving says whether the API is served now.
func (s *apiServer) serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svc != nil
}

// close stops serving for good and waits for the requests in flight.
func (s *apiServer) close() {
	s.stop()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
}

// handler is serve for the micro service.
func (s *apiServer) handler(name string, fn endpointFunc) micro.Handler {
	h := s.serve(name, fn)
	return micro.HandlerFunc(func(req micro.Request) { h(req.Data(), nats.Header(req.Headers()), req.Reply()) })
}

// serve wraps fn: off the subscription's goroutine, bounded, with a
// deadline; the answer goes to reply.
func (s *apiServer) serve(name string, fn endpointFunc) func(data []byte, hdr nats.Header, reply string) {
	deadline := s.c.cfg.APIWriteDeadline
	if readEndpoints[name] {
		deadline = s.c.cfg.APIDeadline
	}
	return func(data []byte, hdr nats.Header, reply string) {
		if e := requestSchema(hdr); e != nil {
			s.respondError(reply, e)
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.respondError(reply, apiErr(messages.CodeUnavailable, fmt.Sprintf("coordinator busy: %d requests in flight; try again", cap(s.slots))))
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			<-s.slots
			return // stopping: the client's timeout or another coordinator answers
		}
		s.running.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.running.Done()
			defer func() { <-s.slots }()
			ctx, cancel := context.WithTimeout(s.ctx, deadline)
			defer cancel()
			ctx = tracing.Extract(ctx, hdr) // the caller's trace (tracing.go)
			answer, e := s.c.safeCall(ctx, name, fn, data)
			if e != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				e = apiErr(messages.CodeUnavailable, fmt.Sprintf("no answer within %s: %s", deadline, e.Message))
			}
			if e != nil {
				s.respondError(reply, e)
				return
			}
			s.respond(reply, answer)
		}()
	}
}

// respondError answers to reply with e, as micro's Request.Error does.
func (s *apiServer) respondError(reply string, e *messages.APIError) {
	if reply == "" {
		return
	}
	body, _ := json.Marshal(messages.ErrorReply{Error: e})
	m := nats.NewMsg(reply)
	m.Data = body
	m.Header.Set(micro.ErrorHeader, e.Message)
	m.Header.Set(micro.ErrorCodeHeader, httpish(e.Code))
	_ = s.c.nc.PublishMsg(m)
}

// respond answers to reply with answer as JSON. Both publish on the
// connection rather than through micro's request: micro reads the
// request's error after the handler returns, and these run after it did
// (on their own goroutine).
func (s *apiServer) respond(reply string, answer any) {
	if reply == "" {
		return
	}
	body, err := json.Marshal(answer)
	if err != nil {
		s.respondError(reply, apiErr(messages.CodeInternal, "encoding the reply: "+err.Error()))
		return
	}
	_ = s.c.nc.Publish(reply, body)
}

// keepServing checks every Config.HealthInterval that the coordinator
// reaches the cluster, stops serving after Config.HealthFailures failed
// checks in a row when another coordinator reaches the cluster
// (othersServing), and serves again after the next good check, or as soon
// as no other coordinator serves, until ctx ends. The check reads the lease key from the control bucket's stream
// leader: what a coordinator cut off the cluster cannot do. Checks that
// keep failing as a cut-off server's requests do (natsconn.CutOff) move
// the connection to another server of its URL list.
func (s *apiServer) keepServing(ctx context.Context) {
	probe := s.c.probe
	if probe == nil {
		r := kvleader.New(s.c.js, s.c.names.ControlBucket())
		probe = func(ctx context.Context) error {
			// The lease is rewritten every renewal interval: its stamp
			// tells the server's time (docs/design.md, "Clocks").
			_, _, stored, err := r.GetStamped(ctx, wire.LeaseKey)
			clock.Observe(s.c.cfg.hooks.Clock, stored)
			return err
		}
	}
	s.healthy.Store(true) // it reached the cluster to start
	go s.answerHealthy(ctx)
	every := s.c.cfg.HealthInterval
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
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// A full store leaves writes unanswered as a cut-off server does,
		// on every server alike: no reason to move then.
		if s.c.storeFullErr() == nil && s.c.cutOff.ObserveConn(s.c.nc, err) {
			// A server cut off the cluster keeps its clients: leave it.
			s.c.log.Warn().Err(err).Str("server", s.c.nc.ConnectedUrlRedacted()).Msg("the server seems cut off the cluster; reconnecting to another")
		}
		s.healthy.Store(err == nil)
		s.c.noteStoreFull()
		if err == nil {
			failures = 0
			if !s.serving() {
				if err := s.start(); err != nil {
					s.c.log.Warn().Err(err).Msg("cannot serve the API again; trying at the next check")
					continue
				}
				s.c.log.Info().Msg("the cluster answers again: serving the API")
			}
			continue
		}
		failures++
		if failures < s.c.cfg.HealthFailures {
			continue
		}
		if !s.serving() {
			// Stopped for another that served: if it no longer does (it
			// failed its own checks since), none would serve.
			if !s.othersServing(ctx) {
				if err := s.start(); err == nil {
					s.c.log.Warn().Int("checks", failures).Msg("cannot reach the cluster, and no other coordinator serves any more: serving again")
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
			s.c.log.Warn().Err(err).Int("checks", failures).Msg("cannot reach the cluster: API no longer served here until it can")
		} else if failures == s.c.cfg.HealthFailures {
			s.c.log.Warn().Err(err).Int("checks", failures).Msg("cannot reach the cluster, and no other coordinator serves: serving on")
		}
	}
}

// othersWait bounds how long othersServing waits for another
// coordinator's answer.
const othersWait = 500 * time.Millisecond

// healthySubject is where coordinators whose last check reached the
// cluster answer with their holder name (not part of the public API).
func (c *Coordinator) healthySubject() string { return c.cfg.Prefix + ".api._healthy" }

// answerHealthy answers on healthySubject while the last check passed,
// until ctx ends.
func (s *apiServer) answerHealthy(ctx context.Context) {
	sub, err := s.c.nc.Subscribe(s.c.healthySubject(), func(m *nats.Msg) {
		if s.healthy.Load() {
			_ = m.Respond([]byte(s.c.cfg.Holder))
		}
	})
	if err != nil {
		s.c.log.Warn().Err(err).Msg("cannot answer other coordinators' health questions")
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// othersServing reports whether a coordinator other than this one reaches
// the cluster (its last check passed) where this one's server can see it:
// then it serves, and this one may stop. Two coordinators that fail their
// checks at once (a meta election) both serve on.
func (s *apiServer) othersServing(ctx context.Context) bool {
	self := s.c.cfg.Holder
	inbox := s.c.nc.NewInbox()
	answers := make(chan *nats.Msg, 16)
	sub, err := s.c.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.c.nc.PublishRequest(s.c.healthySubject(), inbox, nil); err != nil {
		return false
	}
	wait := time.NewTimer(othersWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-wait.C:
			return false
		case m := <-answers:
			if len(m.Data) > 0 && string(m.Data) != self {
				return true
			}
		}
	}
}

// LeaderStatusWait bounds how long a follower waits for the leader's
// answer to a status request before it says unavailable (only the leader
// answers status, docs/design.md "Status never goes back").
const LeaderStatusWait = time.Second

// leaderStatusSubject is where the leader answers jobs.status requests
// that followers forward (not part of the public API).
func (c *Coordinator) leaderStatusSubject() string { return c.cfg.Prefix + ".api._leader.jobs.status" }

// serveLeaderStatus answers followers' forwarded status requests for the
// term (ctx).
func (c *Coordinator) serveLeaderStatus(ctx context.Context) error {
	sub, err := c.nc.Subscribe(c.leaderStatusSubject(), func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(ctx, LeaderStatusWait)
		defer cancel()
		reply, e := c.safeCall(rctx, messages.EndpointJobsStatus, c.apiStatusHere, m.Data)
		var body []byte
		if e != nil {
			body, _ = json.Marshal(messages.ErrorReply{Error: e})
		} else {
			body, _ = json.Marshal(reply)
		}
		_ = m.Respond(body)
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

// askLeaderStatus forwards a status request to the leader; ok=false when
// it did not answer in time (none leads, or it is cut off).
func (c *Coordinator) askLeaderStatus(ctx context.Context, data []byte) (any, *messages.APIError, bool) {
	rctx, cancel := context.WithTimeout(ctx, LeaderStatusWait)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, c.leaderStatusSubject(), data)
	if err != nil {
		return nil, nil, false
	}
	var r messages.StatusReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, nil, false
	}
	if r.Error != nil {
		return nil, r.Error, true
	}
	if r.Status == nil {
		return nil, nil, false
	}
	return r, nil, true
}
