package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/endpoint"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// allEndpoints are also served on messages.Names.APIAllSubject, where every
// serving coordinator answers (Client's retries of a read ask there).
var allEndpoints = []string{messages.EndpointJobsStatus}

// readEndpoints answer from memory or with a few small reads: they get
// Config.Deadline, the others Config.WriteDeadline. The DLQ's list, get
// and stats are not among them: they scan dead letters of up to
// max_payload each, which takes seconds on a busy server.
var readEndpoints = map[string]bool{
	messages.EndpointJobsStatus: true, messages.EndpointJobsList: true,
	messages.EndpointDLQReplays: true,
}

// Config is what a Server serves and how.
type Config struct {
	// Conn is the coordinator's connection; Prefix its subjects' prefix
	// and Names the names under it.
	Conn   *nats.Conn
	Prefix string
	Names  messages.Names
	// Holder names this coordinator among those of its prefix (the
	// lease's holder).
	Holder string
	// Deadline bounds each read request, WriteDeadline each other one;
	// Concurrency the requests handled at once.
	Deadline, WriteDeadline time.Duration
	Concurrency             int
	// HealthInterval is how often the server checks, with Probe, that the
	// coordinator reaches the cluster; after HealthFailures failed checks
	// in a row it stops serving while another coordinator serves.
	HealthInterval time.Duration
	HealthFailures int
	Probe          func(context.Context) error
	// StoreFull returns JetStream's refusal of the coordinator's writes
	// for want of room, or nil: checks that fail then do not move the
	// connection to another server. Checked is called after every check.
	// Both may be nil.
	StoreFull func() error
	Checked   func()
	// CutOff notices, from failing checks, a server cut off the cluster;
	// nil for one with natsconn's defaults.
	CutOff *natsconn.CutOff
	// Endpoints are every endpoint's answer by name (Endpoints builds
	// them); Team answers endpoint name on team's subjects, nil when the
	// coordinator has no teams (Endpoints.Team).
	Endpoints map[string]endpoint.Func
	Team      func(ctx context.Context, team, name string, data []byte) (any, *messages.APIError)
	Logger    zerolog.Logger
}

// Server serves the jetfleet micro service while the coordinator reaches
// the cluster. Each request runs on a goroutine of its own (at most
// Config.Concurrency at once; more are answered "unavailable" at once)
// with a deadline, so that one slow read never holds up the requests
// behind it on the subscription. A coordinator that cannot reach the
// cluster (a node cut off, a server that lost JetStream) stops serving:
// its queue-group subscriptions go, and requests reach a coordinator that
// can answer instead of waiting on this one. Safe for concurrent use.
type Server struct {
	cfg   Config
	ctx   context.Context // the coordinator's; ends every request
	slots chan struct{}

	healthy atomic.Bool // the last check reached the cluster

	mu      sync.Mutex
	svc     micro.Service        // nil while not serving
	all     []*nats.Subscription // the allEndpoints' subjects, while serving
	closed  bool
	running sync.WaitGroup // handlers in flight
}

// NewServer returns a server of cfg whose requests end with ctx. It
// serves nothing until Start.
func NewServer(ctx context.Context, cfg Config) *Server {
	if cfg.CutOff == nil {
		cfg.CutOff = &natsconn.CutOff{}
	}
	if cfg.StoreFull == nil {
		cfg.StoreFull = func() error { return nil }
	}
	if cfg.Checked == nil {
		cfg.Checked = func() {}
	}
	return &Server{cfg: cfg, ctx: ctx, slots: make(chan struct{}, cfg.Concurrency)}
}

// Start serves the API unless it is served already.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil || s.closed {
		return nil
	}
	svc, err := s.serveMicro()
	if err != nil {
		return err
	}
	for _, name := range allEndpoints {
		h := s.serve(name, s.cfg.Endpoints[name])
		sub, err := s.cfg.Conn.Subscribe(s.cfg.Names.APIAllSubject(name), func(m *nats.Msg) { h(m.Data, m.Header, m.Reply) })
		if err != nil {
			s.unsubscribeAll()
			_ = svc.Stop()
			return fmt.Errorf("coordinator: serving %s: %w", s.cfg.Names.APIAllSubject(name), err)
		}
		s.all = append(s.all, sub)
	}
	s.svc = svc
	return nil
}

// serveMicro registers the jetfleet micro service, each endpoint's
// handler made by handler.
func (s *Server) serveMicro() (micro.Service, error) {
	build := version.Get()
	prefix := s.cfg.Prefix
	svc, err := micro.AddService(s.cfg.Conn, micro.Config{
		Name:        messages.ServiceName,
		Version:     build.Semver(),
		Description: "jetfleet coordinator API",
		// fleetctl version reads the build and tells fleets apart.
		Metadata: map[string]string{"prefix": prefix, "build": build.String(), "go": build.Go},
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: micro service: %w", err)
	}
	g := svc.AddGroup(prefix + ".api")
	for name, fn := range s.cfg.Endpoints {
		if err := g.AddEndpoint(strings.ReplaceAll(name, ".", "_"), s.handler(name, fn), micro.WithEndpointSubject(name)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("coordinator: endpoint %s: %w", name, err)
		}
	}
	if err := s.serveTeams(g); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}

// serveTeams adds the team endpoints to the API's group (prefix.api):
// subjects team.*.<endpoint>, the team read from each request's subject.
func (s *Server) serveTeams(g micro.Group) error {
	if s.cfg.Team == nil {
		return nil
	}
	prefix := s.cfg.Prefix + ".api.team."
	for _, name := range wire.TeamEndpoints {
		h := micro.HandlerFunc(func(req micro.Request) {
			team, _, _ := strings.Cut(strings.TrimPrefix(req.Subject(), prefix), ".")
			s.handler(name, func(ctx context.Context, data []byte) (any, *messages.APIError) {
				return s.cfg.Team(ctx, team, name, data)
			}).Handle(req)
		})
		if err := g.AddEndpoint("team_"+strings.ReplaceAll(name, ".", "_"), h, micro.WithEndpointSubject("team.*."+name)); err != nil {
			return fmt.Errorf("coordinator: team endpoint %s: %w", name, err)
		}
	}
	return nil
}

// unsubscribeAll drops the allEndpoints' subscriptions (s.mu held).
func (s *Server) unsubscribeAll() {
	for _, sub := range s.all {
		_ = sub.Unsubscribe()
	}
	s.all = nil
}

// stop stops serving; requests in flight still get their answers.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil {
		_ = s.svc.Stop()
		s.svc = nil
	}
	s.unsubscribeAll()
}

// serving says whether the API is served now.
func (s *Server) serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svc != nil
}

// Close stops serving for good and waits for the requests in flight.
func (s *Server) Close() {
	s.stop()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
}

// handler is serve for the micro service.
func (s *Server) handler(name string, fn endpoint.Func) micro.Handler {
	h := s.serve(name, fn)
	return micro.HandlerFunc(func(req micro.Request) { h(req.Data(), nats.Header(req.Headers()), req.Reply()) })
}

// serve wraps fn: off the subscription's goroutine, bounded, with a
// deadline; the answer goes to reply.
func (s *Server) serve(name string, fn endpoint.Func) func(data []byte, hdr nats.Header, reply string) {
	deadline := s.cfg.WriteDeadline
	if readEndpoints[name] {
		deadline = s.cfg.Deadline
	}
	return func(data []byte, hdr nats.Header, reply string) {
		if e := requestSchema(hdr); e != nil {
			s.respondError(reply, e)
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.respondError(reply, endpoint.Err(messages.CodeUnavailable, fmt.Sprintf("coordinator busy: %d requests in flight; try again", cap(s.slots))))
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
			ctx = tracing.Extract(ctx, hdr) // the caller's trace (internal/tracing)
			answer, e := safeCall(ctx, s.cfg.Logger, name, fn, data)
			if e != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				e = endpoint.Err(messages.CodeUnavailable, fmt.Sprintf("no answer within %s: %s", deadline, e.Message))
			}
			if e != nil {
				s.respondError(reply, e)
				return
			}
			s.respond(reply, answer)
		}()
	}
}

// safeCall runs an endpoint; a panic (a bug a request found) answers that
// request with an internal error instead of ending the coordinator.
func safeCall(ctx context.Context, log zerolog.Logger, name string, fn endpoint.Func, data []byte) (reply any, e *messages.APIError) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("endpoint", name).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("API request panicked; answered with an internal error")
			reply, e = nil, endpoint.Err(messages.CodeInternal, fmt.Sprintf("internal error: %v", p))
		}
	}()
	return fn(ctx, data)
}

// respondError answers to reply with e, as micro's Request.Error does.
func (s *Server) respondError(reply string, e *messages.APIError) {
	if reply == "" {
		return
	}
	body, _ := json.Marshal(messages.ErrorReply{Error: e})
	m := nats.NewMsg(reply)
	m.Data = body
	m.Header.Set(micro.ErrorHeader, e.Message)
	m.Header.Set(micro.ErrorCodeHeader, httpish(e.Code))
	_ = s.cfg.Conn.PublishMsg(m)
}

// respond answers to reply with answer as JSON. Both publish on the
// connection rather than through micro's request: micro reads the
// request's error after the handler returns, and these run after it did
// (on their own goroutine).
func (s *Server) respond(reply string, answer any) {
	if reply == "" {
		return
	}
	body, err := json.Marshal(answer)
	if err != nil {
		s.respondError(reply, endpoint.Err(messages.CodeInternal, "encoding the reply: "+err.Error()))
		return
	}
	_ = s.cfg.Conn.Publish(reply, body)
}

func httpish(code string) string {
	switch code {
	case messages.CodeBadRequest, messages.CodeInvalid:
		return "400"
	case messages.CodeNotFound:
		return "404"
	case messages.CodeConflict:
		return "409"
	case messages.CodeTooLarge:
		return "413"
	case messages.CodeTooMany:
		return "429"
	}
	return "500"
}

// requestSchema refuses an API request of a newer schema version than
// this coordinator reads with the code unavailable, so that the client
// asks again and another coordinator (of the newer release) may answer.
// A bad header names itself.
func requestSchema(hdr nats.Header) *messages.APIError {
	v, err := wire.SchemaOfHeader(hdr.Get(messages.HeaderSchema))
	if err != nil {
		return endpoint.Err(messages.CodeBadRequest, err.Error())
	}
	if err := v.Check("the request"); err != nil {
		return endpoint.Err(messages.CodeUnavailable, err.Error()+"; another coordinator may answer")
	}
	return nil
}
