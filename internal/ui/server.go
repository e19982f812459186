package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	apiclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server is the web dashboard of one fleet. It reads and acts through the
// coordinator's API (the jetfleet micro service) and plain JetStream reads
// and watches, with the permissions of the NATS connection it is given, so
// it runs in fleetctl on any machine as well as inside the coordinator.
// Build it with New; serve it with Run, Serve or Handler. Safe for
// concurrent use.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	names   messages.Names
	client  *apiclient.Client
	guard   *guard
	hub     *hub
	stats   *statsCache
	coords  coordinatorCache
	metrics *metrics
	pages   map[string]*template.Template
	handler http.Handler

	mu       sync.Mutex
	denied   string // the last permissions violation the connection reported
	hubOnce  sync.Once
	hubDone  chan struct{}
	addr     net.Addr
	addrSet  chan struct{}
	addrOnce sync.Once
}

// New returns a dashboard for the fleet that nc reaches. It does not touch
// the server until it serves.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ui: config: %w", err)
	}
	names, err := messages.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("ui: config: %w", err)
	}
	if cfg.Token == "" {
		cfg.Token = NewToken()
	}
	js, err := natsconn.JetStream(nc, cfg.JSDomain)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	cl, err := apiclient.New(nc, cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.With().Str("component", "ui").Logger(),
		nc: nc, js: js, names: names, client: cl,
		guard:   newGuard(cfg.Addr, cfg.Token, cfg.AllowRemote, cfg.ReadOnly),
		metrics: newMetrics(cfg.Registerer),
		hubDone: make(chan struct{}),
		addrSet: make(chan struct{}),
	}
	s.hub = newHub(cfg, s.log, s.metrics)
	s.stats = newStatsCache(js, names, cfg.Clock.Now)
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.handler = s.guard.wrap(s.routes())
	return s, nil
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", f)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Token is the access token every request must carry (Config.Token).
func (s *Server) Token() string { return s.cfg.Token }

// LoginURL is the address that logs a browser in: base (e.g.
// "http://127.0.0.1:8080") with ?token=<token>.
func (s *Server) LoginURL(base string) string { return base + "/?" + tokenParam + "=" + s.cfg.Token }

// Handler is the dashboard as an http.Handler. Live updates need the
// feeds that Run and Serve start (or StartLive).
func (s *Server) Handler() http.Handler { return s.handler }

// NoteAsyncError records an asynchronous error of the dashboard's
// connection (give it to natsconn.Options.OnAsyncError): a permission
// violation is how NATS says a request was refused, and the dashboard
// shows it with the request that then timed out.
func (s *Server) NoteAsyncError(err error) {
	if !natsconn.IsPermissionViolation(err) {
		return
	}
	s.mu.Lock()
	s.denied = err.Error()
	s.mu.Unlock()
	s.log.Warn().Err(err).Msg("NATS refused the dashboard an operation (its credentials' permissions)")
}

func (s *Server) lastDenied() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.denied
}

// StartLive starts the live feeds (the shared watches and subscription)
// until ctx ends, once; Run and Serve call it.
func (s *Server) StartLive(ctx context.Context) {
	s.hubOnce.Do(func() {
		go func() {
			defer close(s.hubDone)
			s.hub.run(ctx, s.nc, s.js, s.names)
		}()
	})
}

// Run listens on Config.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Addr is the address the dashboard listens on, once Run or Serve has
// started (it blocks until then).
func (s *Server) Addr() net.Addr {
	<-s.addrSet
	return s.addr
}

// Serve serves on ln until ctx ends, then shuts down (live streams end,
// requests in progress get 5 seconds).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.addrOnce.Do(func() {
		s.addr = ln.Addr()
		close(s.addrSet)
	})
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	s.StartLive(liveCtx)
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
		BaseContext:       func(net.Listener) context.Context { return liveCtx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info().Str("addr", ln.Addr().String()).Bool("read_only", s.cfg.ReadOnly).Msg("dashboard serving; every request needs its access token")
	if s.cfg.AllowRemote {
		s.log.Warn().Str("addr", ln.Addr().String()).Msg("DASHBOARD REACHABLE FROM OTHER MACHINES (allow-remote): the Host check is off, and anyone with the access token can cancel jobs, replay and purge dead letters; without a TLS proxy in front the token travels in clear")
	}
	select {
	case err := <-errc:
		stopLive()
		<-s.hubDone
		return fmt.Errorf("ui: %w", err)
	case <-ctx.Done():
	}
	stopLive() // ends the live streams, which would hold Shutdown up
	<-s.hubDone
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ui: %w", err)
	}
	return nil
}

// routes maps the dashboard's paths.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, route string, h func(http.ResponseWriter, *http.Request)) {
		mux.Handle(pattern, s.timed(route, http.HandlerFunc(h)))
	}
	handle("GET /{$}", "jobs", s.pageJobs)
	handle("GET /jobs/{id}", "job", s.pageJob)
	handle("POST /jobs/{id}/cancel", "job_cancel", s.postCancel)
	handle("POST /jobs/{id}/pause", "job_pause", s.postPause)
	handle("POST /jobs/{id}/resume", "job_resume", s.postResume)
	handle("GET /dlq", "dlq", s.pageDLQ)
	handle("GET /dlq/{seq}", "dlq_entry", s.pageEntry)
	handle("POST /dlq/replay", "dlq_replay", s.postReplay)
	handle("POST /dlq/purge", "dlq_purge", s.postPurge)
	handle("GET /dlq/replays/{id}", "replay", s.pageReplay)
	handle("POST /dlq/replays/{id}/cancel", "replay_cancel", s.postReplayCancel)
	handle("GET /api/replays/{id}", "api_replay", s.apiReplay)
	handle("GET /agents", "agents", s.pageAgents)
	handle("GET /limits", "limits", s.pageLimits)
	handle("GET /schedules", "schedules", s.pageSchedules)
	handle("POST /pools/{pool}/pause", "pool_pause", s.postPoolPause)
	handle("POST /pools/{pool}/resume", "pool_resume", s.postPoolResume)
	mux.HandleFunc("GET /events", s.live)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	}))
	return mux
}

// timed records a route's serving time.
func (s *Server) timed(route string, h http.Handler) http.Handler {
	obs := s.metrics.requests.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		obs.Observe(time.Since(start).Seconds())
	})
}

// callCtx bounds one call to the fleet.
func (s *Server) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
}
