package agent

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/httpstep"
	"github.com/jetfleet/jetfleet/internal/itemrun"
)

// Config configures an Agent. The zero value is usable: WithDefaults
// fills it, Validate reports every field out of its bounds.
type Config = itemrun.Config

// Verifier checks a work item's signature before the agent runs it
// (Config.WorkVerifier).
type Verifier = itemrun.Verifier

// ReaperMode is how an agent deals with the processes its shell steps
// leave behind (Linux only).
type ReaperMode = itemrun.ReaperMode

// What becomes of the processes shell steps leave behind: ReaperOff kills
// what is left in a step's process group; ReaperSteps also kills and
// reaps what left the group; ReaperAll also reaps every other orphan (a
// program whose only children are steps, PID 1 in a container).
const (
	ReaperOff   = itemrun.ReaperOff
	ReaperSteps = itemrun.ReaperSteps
	ReaperAll   = itemrun.ReaperAll
)

// HandlerFunc runs one step of one item and returns its output, or an
// error (a marker error such as Permanent steers the retry).
type HandlerFunc = itemrun.HandlerFunc

// Call is what a handler is called with: the item, the step's with:
// arguments, the attempt and the ids.
type Call = itemrun.Call

// MapResults is a reduce step's input: the map phase's results.
type MapResults = itemrun.MapResults

// Middleware wraps every handler of an agent (Agent.Use).
type Middleware = itemrun.Middleware

// PanicError is the error a recovered handler panic becomes; it matches
// ErrPanic.
type PanicError = itemrun.PanicError

// DecodeError names the field of a typed handler's payload that did not
// decode; it matches ErrDecode and fails its step permanently.
type DecodeError = itemrun.DecodeError

// Validator is an item type whose Validate method a typed handler calls
// before running; its error fails the step permanently.
type Validator = itemrun.Validator

// Errors a handler's step can end with.
var (
	// ErrDecode matches a DecodeError.
	ErrDecode = itemrun.ErrDecode
	// ErrPanic matches a PanicError.
	ErrPanic = itemrun.ErrPanic
	// ErrJobKilled is the cause a handler's context ends with when its job
	// is cancelled with kill.
	ErrJobKilled = itemrun.ErrJobKilled
	// ErrHTTPAddressRefused is the http handler's refusal of an address
	// Config.HTTPAllow does not let it reach.
	ErrHTTPAddressRefused = httpstep.ErrAddressRefused
)

// HTTPHandlerName is the name of the built-in http handler.
const HTTPHandlerName = httpstep.Name

// Bounds of the http handler.
const (
	MaxHTTPBody        = httpstep.MaxBody
	DefaultHTTPTimeout = httpstep.DefaultTimeout
)

// DefaultClaudeArgs are the arguments of a claude step's command before
// the prompt.
var DefaultClaudeArgs = itemrun.DefaultClaudeArgs

// Defaults and bounds of Config.
const (
	DefaultConcurrency      = itemrun.DefaultConcurrency
	MaxConcurrency          = itemrun.MaxConcurrency
	DefaultShutdownTimeout  = itemrun.DefaultShutdownTimeout
	DefaultMaxOutputBytes   = itemrun.DefaultMaxOutputBytes
	DefaultKeepFailed       = itemrun.DefaultKeepFailed
	DefaultKeepFailedBytes  = itemrun.DefaultKeepFailedBytes
	DefaultClaudeCommand    = itemrun.DefaultClaudeCommand
	DefaultStepTimeout      = itemrun.DefaultStepTimeout
	MaxHistory              = itemrun.MaxHistory
	DefaultPresenceInterval = itemrun.DefaultPresenceInterval
	MinPresenceInterval     = itemrun.MinPresenceInterval
	DefaultResultBatch      = itemrun.DefaultResultBatch
	MaxResultBatch          = itemrun.MaxResultBatch
	MaxPrefetch             = itemrun.MaxPrefetch
	MaxPrefetchFixed        = itemrun.MaxPrefetchFixed
	DefaultResultLinger     = itemrun.DefaultResultLinger
	MaxResultLinger         = itemrun.MaxResultLinger
	DefaultParkAfter        = itemrun.DefaultParkAfter
	MinParkAfter            = itemrun.MinParkAfter
	DefaultLocalRetryMax    = itemrun.DefaultLocalRetryMax
	DefaultLimitLease       = itemrun.DefaultLimitLease
	DefaultLimitWait        = itemrun.DefaultLimitWait
	MinLimitLease           = itemrun.MinLimitLease
	DefaultKillGrace        = itemrun.DefaultKillGrace
)

// Agent pulls work items of its pool and runs their steps with the
// registered handlers. Register handlers and middleware before Run; Run
// itself is safe for concurrent use with Handlers and Name.
type Agent struct {
	e *itemrun.Agent
}

// New returns an agent for nc. Configuration errors are reported by Run.
func New(nc *nats.Conn, cfg Config) *Agent { return &Agent{e: itemrun.New(nc, cfg)} }

// Handle registers fn as the handler named name, replacing any earlier one,
// and returns a for chaining. It panics if called after Run started.
func (a *Agent) Handle(name string, fn HandlerFunc) *Agent {
	a.e.Handle(name, fn)
	return a
}

// HandleBuiltins registers noop, sleep and flaky (see Builtins).
func (a *Agent) HandleBuiltins() *Agent {
	a.e.HandleBuiltins()
	return a
}

// Use adds middleware around every handler of a, registered before or
// after the call. The first added is the outermost. Recover is always
// applied both inside them and outside them. It returns a for chaining and
// panics if called after Run started.
func (a *Agent) Use(mw ...Middleware) *Agent {
	a.e.Use(mw...)
	return a
}

// Handlers returns the names of the handlers registered on a, sorted, the
// built-in http handler included.
func (a *Agent) Handlers() []string { return a.e.Handlers() }

// Name is the agent's name in histories and logs.
func (a *Agent) Name() string { return a.e.Name() }

// Run pulls and runs items until ctx is cancelled, then shuts down in
// phases: stop pulling, let in-flight items finish for ShutdownTimeout,
// cancel the rest and nak them without delay, and wait for pending acks.
func (a *Agent) Run(ctx context.Context) error { return a.e.Run(ctx) }

// Typed turns a handler of items of type T into a HandlerFunc (River's
// Worker[T]): each item's JSON payload is decoded into a T first; a field
// of the wrong type, invalid JSON, or a T whose Validate method fails
// makes the step fail permanently with a DecodeError naming the field.
func Typed[T any](fn func(ctx context.Context, c *Call, item T) (any, error)) HandlerFunc {
	return itemrun.Typed(fn)
}

// TypedWith is Typed with typed step arguments: the step's with: map is
// decoded into a W too, and a with: field W does not declare is an error.
func TypedWith[T, W any](fn func(ctx context.Context, c *Call, item T, with W) (any, error)) HandlerFunc {
	return itemrun.TypedWith(fn)
}

// HandleFunc registers fn, a handler of items of type T (see Typed), as the
// handler named name on a, like Agent.Handle.
func HandleFunc[T any](a *Agent, name string, fn func(ctx context.Context, c *Call, item T) (any, error)) *Agent {
	return a.Handle(name, Typed(fn))
}

// HandleWith registers fn, a handler of items of type T with step
// arguments of type W (see TypedWith), as the handler named name on a.
func HandleWith[T, W any](a *Agent, name string, fn func(ctx context.Context, c *Call, item T, with W) (any, error)) *Agent {
	return a.Handle(name, TypedWith(fn))
}

// Builtins returns the handlers every stock agent registers, for trying and
// measuring a fleet: noop, sleep and flaky.
func Builtins() map[string]HandlerFunc { return itemrun.Builtins() }

// Recover turns a panic of the handler it wraps into a *PanicError. The
// agent wraps every handler in it; it is exported for calling a handler on
// its own, in a test.
func Recover() Middleware { return itemrun.Recover() }

// Logging logs each handler call on log at debug level, and each failure
// at warn level, with the item's ids, the step, the attempt and the
// duration.
func Logging(log zerolog.Logger) Middleware { return itemrun.Logging(log) }
