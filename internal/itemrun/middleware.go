package itemrun

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
)

// Middleware wraps a handler, Watermill- and Asynq-style: it may act before
// and after next, change the call's context, the output or the error, or
// not call next at all. It must be safe for concurrent use.
type Middleware func(next HandlerFunc) HandlerFunc

// Use adds middleware around every handler of a, registered before or
// after the call. The first added is the outermost. [Recover] is always
// applied both inside them (a handler's panic reaches them as a
// *[PanicError]) and outside them (a middleware's own panic fails the
// step, not the agent). It returns a for chaining and panics if called after
// Run started.
func (a *Agent) Use(mw ...Middleware) *Agent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("agent: Use called after Run")
	}
	a.middleware = append(a.middleware, mw...)
	return a
}

// chain wraps fn in mws, the first outermost.
func chain(fn HandlerFunc, mws []Middleware) HandlerFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		fn = mws[i](fn)
	}
	return fn
}

// ErrPanic is matched (errors.Is) by the error [Recover] returns for a
// handler that panicked.
var ErrPanic = errors.New("handler panicked")

// PanicError is a handler's panic turned into an error by [Recover]. It
// is an ordinary failure: the step's retry_config decides whether it runs
// again.
type PanicError struct {
	// Value is what the handler panicked with; Stack the goroutine's stack
	// at the panic.
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Is matches ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Recover turns a panic of the handler it wraps into a *[PanicError]. The
// agent wraps every handler in it (see [Agent.Use]), so a panicking handler
// or middleware fails its step instead of the agent; it is exported for
// calling a handler on its own, in a test.
func Recover() Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, c *Call) (v any, err error) {
			defer func() {
				if r := recover(); r != nil {
					v, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return next(ctx, c)
		}
	}
}

// Logging logs each handler call on log at debug level, and each failure
// at warn level, with the item's ids, the step, the attempt and the
// duration. It is an example of a middleware as much as a tool.
func Logging(log zerolog.Logger) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, c *Call) (any, error) {
			start := time.Now()
			v, err := next(ctx, c)
			ev := log.Debug()
			if err != nil {
				ev = log.Warn().Err(err)
			}
			ev.Str("job_id", c.JobID).Str("item_id", c.ItemID).Str("step", c.StepName).
				Int("attempt", c.Attempt).Dur("duration", time.Since(start)).Msg("handler call")
			return v, err
		}
	}
}
