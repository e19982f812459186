package itemrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/httpstep"
	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/pause"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/secret"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// publishAsyncTimeout bounds the wait for an async publish's PubAck.
const publishAsyncTimeout = 10 * time.Second

// Agent runs work items of one pool. Register handlers with Handle before
// Run; Run may be called once. Handle and Run are safe for concurrent use.
type Agent struct {
	cfg Config
	nc  *nats.Conn
	log zerolog.Logger
	// fencedLog logs at most one "state changed under us" line per
	// fencedLogPeriod (link.go).
	fencedLog zerolog.Logger
	// ackWait is the work consumer's AckWait (stillHeld); 0 unknown.
	ackWait time.Duration
	tr      tracing.Tracer // spans (tracing.go); off when zero

	// httpc is the http steps' client, made on first use (internal/httpstep's Guard).
	httpOnce sync.Once
	httpc    *http.Client

	// workerStarts counts the worker goroutines consume started: its
	// slots' first workers and those free started for want of a spare.
	workerStarts atomic.Int64

	mu         sync.RWMutex
	handlers   map[string]HandlerFunc
	middleware []Middleware
	// wrapped holds the handlers in their middleware, built when Run
	// starts (no handler or middleware is added after).
	wrapped map[string]HandlerFunc
	started bool

	// Set up by Run. What the failure path touches is behind the narrow
	// interfaces of deps.go, so that it is tested without a server.
	js      jetstream.JetStream
	pub     publisher // results, events
	names   messages.Names
	items   itemStore
	states  *stateCache // states written before a delayed nak (statecache.go); nil in unit tests
	jobs    *jobCache
	kills   *killSwitch // the map items in flight, for a cancel with kill
	budget  retryBudget
	dlq     deadLetters
	metrics *metrics
	// results carries finished items' results to the batcher, acks the
	// published batches to the ack loop (batch.go).
	results chan pendingResult
	naks    *nakPacer // delayed naks, sent on ticks (nakpace.go); nil: at once
	// localRetries holds short retries until they run again here (localretry.go);
	// nil: every retry is a delayed nak.
	localRetries *localRetries
	acks         chan pendingAck
	// prefetch sizes the buffer of work messages (pull.go).
	prefetch *prefetch
	hb       time.Duration
	// maxPayloadOf is the server's max_payload (nc.MaxPayload).
	maxPayloadOf func() int64
	// maxDeliver is the consumer's MaxDeliver (0 = unlimited): on that
	// delivery a retry would never come back, so the item gives up instead.
	maxDeliver uint64
	// breakers follows the circuit breakers of jobs that have one.
	breakers breakerStates
	// limits takes the tokens and slots of steps' limits (limit.go).
	limits     *limit.Limiter
	limitStore *limit.Store
	// stepEnv is what shell steps see of the agent's environment.
	stepEnv []string
	// secrets is what jobs' secrets and env files may read (jobenv.go).
	secrets secret.Source
	// presence publishes who the agent is and how busy (presence.go).
	presence *presence
	// cutOff notices, from failing pulls, a server cut off the cluster.
	cutOff natsconn.CutOff
	// jobsReplica, set by tests before Run, wraps the job cache's direct
	// gets: a lagging replica's answers.
	jobsReplica func(recordGetter) recordGetter
	// parking is set once the pool's park stream exists (park.go); until
	// then parkRecheck (set by Run) looks again, at most every
	// parkRecheckEvery, since the coordinator makes the stream when the
	// pool's first job arrives.
	parking     atomic.Bool
	parkRecheck func() bool
	parkMu      sync.Mutex // serialises the looks; guards parkNext
	// relCtx bounds the releases of breaker-parked items (release.go),
	// relWG waits for them; relMu guards relCtx against relWG.Add.
	relMu    sync.Mutex
	relCtx   context.Context
	relWG    sync.WaitGroup
	parkNext time.Time
	// pauses is what the pause bucket says is paused (hold.go); pauseKV
	// the bucket, followed while Run runs.
	pauses  *pause.View
	pauseKV jetstream.KeyValue
	// link says whether the hub's JetStream answers (link.go); stopHeld
	// ends the wait of results held while it does not (shutdown).
	link     *linkState
	stopHeld <-chan struct{}
	// dirs are the items' directories (itemdir.go).
	dirs *itemDirs
	// claude is the script that runs Claude Code's CLI (at claudePath)
	// for a claude step, "" when the agent has no CLI (claude.go).
	claude, claudePath string
}

// New returns an agent for nc. Configuration errors are reported by Run.
func New(nc *nats.Conn, cfg Config) *Agent {
	cfg = cfg.WithDefaults()
	return &Agent{
		cfg:      cfg,
		nc:       nc,
		tr:       tracing.New(cfg.TracerProvider),
		log:      cfg.Logger.With().Str("component", "agent").Str("pool", cfg.Pool).Str("agent", cfg.Name).Logger(),
		handlers: map[string]HandlerFunc{},
		kills:    newKillSwitch(),
		dirs:     newItemDirs(cfg.WorkDir, cfg.KeepFailed, cfg.KeepFailedBytes),
		// A method value: New(nil, cfg) is fine until Run.
		maxPayloadOf: nc.MaxPayload,
	}
}

// Handle registers fn as the handler named name, replacing any earlier one,
// and returns a for chaining. It panics if called after Run started.
func (a *Agent) Handle(name string, fn HandlerFunc) *Agent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("agent: Handle called after Run")
	}
	a.handlers[name] = fn
	return a
}

// HandleBuiltins registers noop, sleep and flaky (see Builtins).
func (a *Agent) HandleBuiltins() *Agent {
	for name, fn := range Builtins() {
		a.Handle(name, fn)
	}
	return a
}

// handler returns the handler named name in its middleware, inside
// Recover.
func (a *Agent) handler(name string) (HandlerFunc, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.wrapped != nil {
		fn, ok := a.wrapped[name]
		return fn, ok
	}
	fn, ok := a.handlers[name]
	if !ok && name == httpstep.Name {
		fn, ok = a.httpStep, true // built in, unless the agent registers its own
	}
	if !ok {
		return nil, false
	}
	return a.wrapLocked(fn), true
}

// httpStep is the agent's built-in http handler (internal/httpstep): its
// calls go through the guard of the agent's allow-list and connection.
func (a *Agent) httpStep(ctx context.Context, c *Call) (any, error) {
	a.httpOnce.Do(func() {
		allow, _ := httpstep.ParseAllow(a.cfg.HTTPAllow) // checked by Config.Validate
		a.httpc = httpstep.NewGuard(allow, a.nc).Client()
	})
	return httpstep.Do(ctx, a.httpc, &httpstep.Call{JobID: c.JobID, ItemID: c.ItemID, Attempt: c.Attempt, Item: c.Item, With: c.With})
}

// wrapLocked puts fn in the middleware, with Recover inside (a handler's
// panic is an error every middleware sees) and outside (a middleware's
// panic fails the step, not the agent).
func (a *Agent) wrapLocked(fn HandlerFunc) HandlerFunc {
	if len(a.middleware) == 0 {
		return Recover()(fn)
	}
	return Recover()(chain(Recover()(fn), a.middleware))
}

// Handlers returns the names of the handlers registered on a, sorted. The
// agent announces them in its presence, and the coordinator refuses a job
// whose steps name a handler no agent of the pool has.
func (a *Agent) Handlers() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	names := slices.Sorted(maps.Keys(a.handlers))
	if _, ok := a.handlers[httpstep.Name]; !ok {
		names = append(names, httpstep.Name) // built in (internal/httpstep)
		slices.Sort(names)
	}
	return names
}

// Name is the agent's name in histories and logs.
func (a *Agent) Name() string { return a.cfg.Name }

// Run pulls and runs items until ctx is cancelled, then shuts down in
// phases: stop pulling, let in-flight items finish for ShutdownTimeout,
// cancel the rest and nak them without delay, and wait for pending acks.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.cfg.Validate(); err != nil {
		return fmt.Errorf("agent: config: %w", err)
	}
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.started = true
	a.wrapped = make(map[string]HandlerFunc, len(a.handlers))
	for name, fn := range a.handlers {
		a.wrapped[name] = a.wrapLocked(fn)
	}
	if _, ok := a.wrapped[httpstep.Name]; !ok {
		a.wrapped[httpstep.Name] = a.wrapLocked(a.httpStep) // built in (internal/httpstep)
	}
	a.mu.Unlock()

	filter, err := shell.NewEnvFilter(a.cfg.StepEnv, a.cfg.StepEnvUnsafe)
	if err != nil {
		return fmt.Errorf("agent: config: step_env: %w", err)
	}
	a.stepEnv = filter.Filter(a.cfg.Environ())
	a.secrets = secretSource(&a.cfg)
	a.claudePath, a.claude = claudeScript(a.cfg.ClaudeCommand, a.cfg.ClaudeArgs)
	stopReaper, err := a.startReaper()
	if err != nil {
		return err
	}
	defer stopReaper()
	defer a.dirs.close() // after the last item: consume waits for them
	// Only when no process of a step outlives it may its emptied directory
	// serve another item (itemdir.go).
	a.dirs.recycle.Store(shell.Subreaping())

	names, err := messages.NewNames(a.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.names = names
	// A PubAck lost in a reconnect must not leave a future pending forever:
	// the ack loop would wait on it and shutdown with it.
	if a.js, err = natsconn.JetStream(a.nc, a.cfg.JSDomain, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.pub = a.js
	// No responders (a wrong --js-domain, a leaf node whose link is down)
	// is waited out with a warning that says what to check, not an exit.
	var cons jetstream.Consumer
	reach := natsconn.Reacher{Logger: a.log, Domain: a.cfg.JSDomain}
	err = reach.Reach(ctx, "work consumer "+names.AgentsConsumer(a.cfg.Pool), func(ctx context.Context) error {
		var err error
		cons, err = provision.WaitPool(ctx, a.js, names, a.cfg.Pool, a.cfg.hooks.Provision)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("agent: %w", err)
	}
	if err := a.setup(ctx, cons); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = a.budget.Close() }()
	defer a.breakers.close()
	defer a.startReleases(ctx)() // stopped before the breakers close
	defer a.limitStore.Close()
	defer a.limits.Close() // before the store: the slots held for callers to come go back
	stopEnded, err := a.watchEnded()
	if err != nil {
		return fmt.Errorf("agent: map_ended events: %w", err)
	}
	defer stopEnded()
	stopPauses, err := a.followPauses(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopPauses()
	a.log.Info().Int("concurrency", a.cfg.Concurrency).Dur("heartbeat", a.hb).Msg("agent running")
	stopPresence := a.presence.start(ctx)
	defer stopPresence()
	stopService, err := a.serve()
	if err != nil {
		return err
	}
	defer stopService()
	return a.consume(ctx, cons)
}

// startReaper makes the process a child subreaper as Config.Reaper says and
// reaps orphans until the returned stop is called.
func (a *Agent) startReaper() (stop func(), err error) {
	mode := shell.ReapSteps
	switch a.cfg.Reaper {
	case ReaperOff:
		return func() {}, nil
	case ReaperAll:
		mode = shell.ReapAll
	}
	if err := shell.EnableSubreaper(mode); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			a.log.Warn().Err(err).Msg("processes that shell steps leave outside their process group are not cleaned up here")
			return func() {}, nil
		}
		return nil, fmt.Errorf("agent: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		shell.Reap(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

func (a *Agent) setup(ctx context.Context, cons jetstream.Consumer) error {
	info := cons.CachedInfo()
	// The server's time when it answered for the consumer: a fresh bound
	// for the clock, before any work message, whose stamp may be long past
	// (a redelivery, a backlog), is seen (docs/design.md, "Clocks").
	clock.Observe(a.cfg.hooks.Clock, info.TimeStamp)
	if info.Config.MaxDeliver > 0 {
		a.maxDeliver = uint64(info.Config.MaxDeliver)
	}
	a.ackWait = info.Config.AckWait
	a.hb = a.cfg.Heartbeat
	if a.hb == 0 {
		a.hb = info.Config.AckWait / 3
		if a.hb <= 0 {
			a.hb = 10 * time.Second
		}
	}
	var err error
	if a.items, err = a.waitKV(ctx, a.names.ItemsBucket()); err != nil {
		return err
	}
	if a.pauseKV, err = a.waitKV(ctx, a.names.PauseBucket()); err != nil {
		return err
	}
	// Specs come from the pool's specs bucket; the jobs bucket, where an
	// earlier version's coordinator kept them, is read only while the
	// agent's permissions allow it (specs.go).
	a.jobs = newJobCache(nil, nil)
	denials := natsconn.WatchDenials(a.nc)
	a.jobs.specs = newSpecSourceDenied(a.js, a.names, a.cfg.Pool, a.jobsReplica, denials, natsconn.APIPrefix(a.cfg.JSDomain))
	a.jobs.legacy = &legacyRecords{js: a.js, names: a.names, apiPrefix: natsconn.APIPrefix(a.cfg.JSDomain),
		denials: denials, wrap: a.jobsReplica}
	bkv, err := a.waitKV(ctx, a.names.BudgetBucket())
	if err != nil {
		return err
	}
	bopts := []budget.Option{budget.WithLogger(a.log), budget.WithJetStream(a.js), budget.WithLimits(a.jobs.budgetLimits)}
	if a.cfg.Registerer != nil {
		bopts = append(bopts, budget.WithRegisterer(a.cfg.Registerer))
	}
	if a.budget, err = budget.New(bkv, bopts...); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	dw := dlq.NewWriter(a.js, a.names, a.cfg.Pool)
	dw.Denials = denials
	a.dlq = dw
	// Checked whatever ParkAfter says: an agent that parks nothing itself
	// still meets deliveries other agents' parked copies superseded.
	pctx, cancel := context.WithTimeout(ctx, parkCheckTimeout)
	parking, err := parkingAvailable(pctx, a.js, a.names, a.cfg.Pool)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Not known yet (a cluster still electing its leaders, a slow
		// server): as if there were none, and looked for again when a
		// retry would park or a parked copy's delivery comes (parkingOn).
		a.log.Warn().Err(err).Msg("cannot tell yet whether the pool's park stream exists; looking again when a retry would park")
	}
	a.parking.Store(parking)
	a.parkRecheck = func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), parkCheckTimeout)
		defer cancel()
		ok, _ := parkingAvailable(ctx, a.js, a.names, a.cfg.Pool)
		return ok
	}
	if err == nil && !parking && a.cfg.ParkAfter > 0 {
		a.log.Info().Msg("no park stream for the pool yet (the coordinator makes it with the pool's first job): long retries wait in delayed naks until it exists")
	}
	if a.breakers, err = a.openBreakers(ctx); err != nil {
		return err
	}
	if err := a.openLimits(ctx); err != nil {
		return err
	}
	a.metrics = newMetrics(a.cfg.Registerer)
	a.presence = newPresence(a)
	a.link = newLinkState(a.log, a.cfg.JSDomain)
	a.fencedLog = a.log.Sample(&zerolog.BurstSampler{Burst: 1, Period: fencedLogPeriod})
	a.prefetch = newPrefetch(a.cfg)
	a.states = newStateCache(stateCacheSize)
	a.naks = newNakPacer()
	if a.cfg.LocalRetryMax > 0 {
		a.localRetries = newLocalRetries()
	}
	a.results = make(chan pendingResult, 4*a.cfg.ResultBatch)
	a.acks = make(chan pendingAck, 64)
	return nil
}

// waitKV waits for a bucket the coordinator creates.
func (a *Agent) waitKV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	b := retry.NewBackoff(waitKVBackoff, nil, nil)
	for {
		kv, err := a.js.KeyValue(ctx, bucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) && !natsconn.Unreachable(err) && !natsconn.TimedOut(ctx, err) {
			return nil, fmt.Errorf("agent: bucket %s: %w", bucket, err)
		}
		if err := b.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// waitKVBackoff spaces waitKV's tries: 100ms doubling to 2s.
var waitKVBackoff = retry.Exponential(100*time.Millisecond, 2*time.Second)

// bookkeepingWorkers is how many goroutines an agent runs per slot at
// most (see consume): room for the items whose runs have ended and whose
// bookkeeping waits on KV round trips.
const bookkeepingWorkers = 4

// consume runs the pull loop (pull.go) with Concurrency slots.
func (a *Agent) consume(ctx context.Context, cons jetstream.Consumer) error {
	// workCtx outlives ctx by up to ShutdownTimeout so in-flight items can finish.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	ackDone := make(chan struct{})
	a.stopHeld = ctx.Done()
	go a.batchLoop()
	go func() { defer close(ackDone); a.ackLoop() }()
	go a.naks.run()

	buf := make(chan jetstream.Msg, a.prefetch.max)
	taken := make(chan struct{}, 1)
	// Concurrency workers run items, one slot each. A worker whose item
	// can run no more of its steps in the delivery (process calls free)
	// hands its slot to another worker and finishes the item's bookkeeping
	// (budget claim, state write and delayed nak, dead letter) on its own,
	// then waits as a spare: bookkeeping waits on KV round trips, and must
	// not keep the slot from the next item. At most (bookkeepingWorkers-1) ×
	// Concurrency items do their bookkeeping so at once; beyond that a
	// worker keeps its slot through it.
	slots := make([]hbSlot, a.cfg.Concurrency)
	stopHB := a.heartbeats(slots)
	defer stopHB()
	detached := make(chan struct{}, (bookkeepingWorkers-1)*a.cfg.Concurrency)
	// A worker whose bookkeeping is done waits in spare for the next slot
	// a worker hands over, rather than ending: a new goroutine grows its
	// stack again, copying it each time, through the same deep calls (8 %
	// of an agent's CPU in a job of flaky items, docs/benchmarks.md).
	// Spares are at most the workers detached at once.
	spare := make(chan *hbSlot)
	stopSpares := make(chan struct{})
	var workers sync.WaitGroup
	var work func(slot *hbSlot)
	work = func(slot *hbSlot) {
		defer workers.Done()
		var t0 time.Time
		gone := false
		// free hands the slot over (see above); made once per worker.
		free := func() {
			select {
			case detached <- struct{}{}:
			default:
				return // bookkeeping enough already: keep the slot through it
			}
			gone = true
			end := time.Now()
			a.prefetch.observeAt(end.Sub(t0), end) // the buffer is sized by how long an item holds its slot
			select {
			case spare <- slot:
			default:
				workers.Add(1)
				a.workerStarts.Add(1)
				go work(slot)
			}
		}
		for {
			for m := range buf {
				select {
				case taken <- struct{}{}:
				default:
				}
				if ctx.Err() != nil {
					// Buffered when shutdown began: give it back at once.
					_ = m.Nak()
					continue
				}
				_, job, _ := wire.ParseWork(a.names, m.Subject())
				a.metrics.inFlight.Inc()
				a.presence.begin(job)
				t0 = time.Now()
				a.safeProcessOn(workCtx, m, slot, free)
				a.presence.end(job)
				a.metrics.inFlight.Dec()
				if gone {
					break
				}
				end := time.Now()
				a.prefetch.observeAt(end.Sub(t0), end)
			}
			if !gone {
				return // buf closed
			}
			<-detached
			select {
			case slot = <-spare:
				gone = false
			case <-stopSpares:
				return
			}
		}
	}
	for i := range slots {
		workers.Add(1)
		a.workerStarts.Add(1)
		go work(&slots[i])
	}

	pullErr := a.pull(ctx, cons, buf, taken)
	if a.localRetries != nil {
		a.localRetries.close() // what waits is naked; a retry from now on is a delayed nak
	}
	close(buf)
	close(stopSpares)

	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(a.cfg.ShutdownTimeout):
		a.log.Warn().Dur("timeout", a.cfg.ShutdownTimeout).Msg("shutdown timeout: cancelling in-flight items")
		cancelWork()
		<-finished
	}
	a.naks.close()   // the items' delayed naks, before the connection drains
	close(a.results) // the batcher publishes what it holds, then closes a.acks
	<-ackDone
	if pullErr != nil && ctx.Err() == nil {
		return fmt.Errorf("agent: pull: %w", pullErr)
	}
	return nil
}
