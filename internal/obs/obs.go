// Package obs wires logging and the /metrics endpoint for the binaries.
package obs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Logger returns a zerolog logger at level ("debug", "info", "warn",
// "error"; "" = info), human-readable when pretty.
func Logger(w io.Writer, level string, pretty bool) (zerolog.Logger, error) {
	lvl := zerolog.InfoLevel
	if level != "" {
		var err error
		if lvl, err = zerolog.ParseLevel(level); err != nil {
			return zerolog.Nop(), err
		}
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// Registry returns a registry with the Go and process collectors.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ServeMetrics serves /metrics (and /healthz) on addr until ctx ends. An
// empty addr serves nothing. It returns once the listener is bound.
func ServeMetrics(ctx context.Context, addr string, g prometheus.Gatherer, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return serve(ctx, addr, mux, "metrics", log)
}

// ServePprof serves the runtime profiles of net/http/pprof under
// /debug/pprof/ on addr until ctx ends, for measuring where a daemon's
// CPU goes (scripts/bench-daemons.sh -pprof). An empty addr serves
// nothing; the profiles show the process's internals, so addr should be
// loopback. It returns once the listener is bound.
func ServePprof(ctx context.Context, addr string, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serve(ctx, addr, mux, "pprof", log)
}

// serve serves h on addr until ctx ends; it returns once the listener is bound.
func serve(ctx context.Context, addr string, h http.Handler, what string, log zerolog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// No WriteTimeout: a CPU profile takes as long as its seconds= asks.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("server", what).Msg("http server stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Str("server", what).Msg("serving")
	return nil
}
