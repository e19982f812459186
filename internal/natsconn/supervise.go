package natsconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/retry"
)

// Defaults of Supervisor.
const (
	// DefaultRestartMin and DefaultRestartMax bound the pause before a new
	// connection replaces one the server closed: it doubles from the
	// minimum while runs keep ending early, up to the maximum.
	DefaultRestartMin = time.Second
	DefaultRestartMax = 30 * time.Second
	// DefaultHealthyRun is how long a run must last for the pause to go
	// back to the minimum.
	DefaultHealthyRun = time.Minute
)

// ErrConnectionLost is wrapped by the error a component's Run returns when
// its connection was closed for good under it (not by the caller).
var ErrConnectionLost = errors.New("natsconn: the NATS connection was closed")

// Lost returns an error wrapping ErrConnectionLost and nats.ErrConnectionClosed
// that says why nc was closed (its last error, e.g. "nats: maximum control
// line exceeded"), for components whose loops ended because of it.
func Lost(nc *nats.Conn) error {
	if last := nc.LastError(); last != nil {
		return fmt.Errorf("%w (%w): %w", ErrConnectionLost, nats.ErrConnectionClosed, last)
	}
	return fmt.Errorf("%w (%w)", ErrConnectionLost, nats.ErrConnectionClosed)
}

// Supervisor keeps a component running on a NATS connection. nats.go
// reconnects by itself after network failures (Connect sets
// MaxReconnects(-1)), but when the server closes a connection with a
// protocol error — such as "maximum control line exceeded", sent for a
// subject longer than 4 KiB — nats.go closes it for good. A process would
// then have nothing left to run on; a Supervisor starts the component
// again on a new connection instead.
type Supervisor struct {
	// Options are used to connect, every time.
	Options Options
	// URL is used when Options.URL is empty.
	URL string
	// Logger reports connection losses and restarts. Defaults to zerolog.Nop().
	Logger zerolog.Logger
	// RestartMin, RestartMax and HealthyRun default to DefaultRestartMin,
	// DefaultRestartMax and DefaultHealthyRun.
	RestartMin, RestartMax, HealthyRun time.Duration
	// OnConnect, when set, is called with each new connection before run.
	OnConnect func(*nats.Conn)
}

// Run calls run with a live connection until ctx ends. The connection is
// made by Options.Connect, retried every RestartMin while the server cannot
// be reached. When the server closes the connection for good, run's
// context is cancelled; once run returns, it is called again on a new
// connection, after a pause. Run returns nil when ctx ends (after draining
// the connection), or run's error when run fails while its connection is
// still open: a configuration or permission problem that a new connection
// would not fix, reported once, never a restart loop.
func (s Supervisor) Run(ctx context.Context, run func(ctx context.Context, nc *nats.Conn) error) error {
	s = s.withDefaults()
	pauses := retry.NewBackoff(retry.Exponential(s.RestartMin, s.RestartMax), nil, nil)
	for {
		nc, err := s.connect(ctx)
		if nc == nil {
			return err // ctx ended
		}
		runCtx, cancel := context.WithCancel(ctx)
		closed := make(chan struct{})
		var once sync.Once
		onClosed := func(*nats.Conn) { cancel(); once.Do(func() { close(closed) }) }
		nc.SetClosedHandler(onClosed)
		if nc.IsClosed() { // closed before the handler was set
			onClosed(nc)
		}
		if s.OnConnect != nil {
			s.OnConnect(nc)
		}
		start := time.Now()
		runErr := run(runCtx, nc)
		cancel()
		if ctx.Err() != nil {
			// Drain delivers what is buffered and flushes what was published,
			// then closes (nats.go's DrainTimeout bounds it).
			if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				s.Logger.Debug().Err(err).Msg("draining the connection")
				nc.Close()
			}
			<-closed
			return nil
		}
		if !nc.IsClosed() {
			nc.Close()
			if runErr == nil {
				runErr = errors.New("stopped although its connection is open")
			}
			return runErr
		}
		if time.Since(start) >= s.HealthyRun {
			pauses.Reset()
		}
		pause := pauses.Next()
		ev := s.Logger.Error()
		if last := nc.LastError(); last != nil {
			ev = ev.AnErr("cause", last)
		}
		ev.Err(runErr).Dur("delay", pause).
			Msg("the server closed the connection for good; starting again on a new connection")
		if retry.Sleep(ctx, nil, pause) != nil {
			return nil
		}
	}
}

func (s Supervisor) withDefaults() Supervisor {
	if s.RestartMin <= 0 {
		s.RestartMin = DefaultRestartMin
	}
	if s.RestartMax < s.RestartMin {
		s.RestartMax = max(DefaultRestartMax, s.RestartMin)
	}
	if s.HealthyRun <= 0 {
		s.HealthyRun = DefaultHealthyRun
	}
	return s
}

// connect connects, retrying while the server cannot be reached; it
// returns a nil connection when ctx ends, or a configuration error.
func (s Supervisor) connect(ctx context.Context) (*nats.Conn, error) {
	for {
		nc, err := s.Options.Connect(s.URL)
		if err == nil {
			return nc, nil
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, err
		}
		s.Logger.Warn().Err(err).Msg("cannot connect yet; retrying")
		if retry.Sleep(ctx, nil, s.RestartMin) != nil {
			return nil, nil
		}
	}
}
