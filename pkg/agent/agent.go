package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/pkg/budget"
	"github.com/jetfleet/jetfleet/pkg/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// publishAsyncTimeout bounds the wait for an async publish's PubAck.
const publishAsyncTimeout = 10 * time.Second

// Agent runs work items of one pool. Register handlers with Handle before
// Run; Run may be called once. Handle and Run are safe for concurrent use.
type Agent struct {
	cfg Config
	nc  *nats.Conn
	log zerolog.Logger

	mu       sync.RWMutex
	handlers map[string]HandlerFunc
	started  bool

	// Set up by Run. What the failure path touches is behind the narrow
	// interfaces of deps.go, so that it is tested without a server.
	js      jetstream.JetStream
	pub     publisher // results, events
	names   messages.Names
	items   itemStore
	jobs    *jobCache
	budget  retryBudget
	dlq     deadLetters
	metrics *metrics
	// results carries finished items' results to the batcher, acks the
	// published batches to the ack loop (batch.go).
	results chan pendingResult
	acks    chan pendingAck
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
	// presence publishes who the agent is and how busy (presence.go).
	presence *presence
}

// New returns an agent for nc. Configuration errors are reported by Run.
func New(nc *nats.Conn, cfg Config) *Agent {
	cfg = cfg.WithDefaults()
	return &Agent{
		cfg:      cfg,
		nc:       nc,
		log:      cfg.Logger.With().Str("component", "agent").Str("pool", cfg.Pool).Str("agent", cfg.Name).Logger(),
		handlers: map[string]HandlerFunc{},
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

func (a *Agent) handler(name string) (HandlerFunc, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	fn, ok := a.handlers[name]
	if !ok && name == HTTPHandlerName {
		return httpHandler, true
	}
	return fn, ok
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
	a.mu.Unlock()

	filter, err := shell.NewEnvFilter(a.cfg.StepEnv, a.cfg.StepEnvUnsafe)
	if err != nil {
		return fmt.Errorf("agent: config: step_env: %w", err)
	}
	a.stepEnv = filter.Filter(a.cfg.Environ())
	stopReaper, err := a.startReaper()
	if err != nil {
		return err
	}
	defer stopReaper()

	names, err := messages.NewNames(a.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.names = names
	// A PubAck lost in a reconnect must not leave a future pending forever:
	// the ack loop would wait on it and shutdown with it.
	if a.js, err = jetstream.New(a.nc, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.pub = a.js
	cons, err := provision.WaitPool(ctx, a.js, names, a.cfg.Pool, a.cfg.Provision)
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
	defer a.limitStore.Close()
	stopEnded, err := a.watchEnded()
	if err != nil {
		return fmt.Errorf("agent: map_ended events: %w", err)
	}
	defer stopEnded()
	a.log.Info().Int("concurrency", a.cfg.Concurrency).Dur("heartbeat", a.hb).Msg("agent running")
	stopPresence := a.presence.start(ctx)
	defer stopPresence()
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
	if info.Config.MaxDeliver > 0 {
		a.maxDeliver = uint64(info.Config.MaxDeliver)
	}
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
	jobsKV, err := a.waitKV(ctx, a.names.JobsBucket())
	if err != nil {
		return err
	}
	a.jobs = newJobCache(jobsKV)
	bkv, err := a.waitKV(ctx, a.names.BudgetBucket())
	if err != nil {
		return err
	}
	bopts := []budget.Option{budget.WithLogger(a.log), budget.WithJetStream(a.js)}
	if a.cfg.Registerer != nil {
		bopts = append(bopts, budget.WithRegisterer(a.cfg.Registerer))
	}
	if a.budget, err = budget.New(bkv, bopts...); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.dlq = dlq.NewWriter(a.js, a.names, a.cfg.Pool)
	if a.breakers, err = a.openBreakers(ctx); err != nil {
		return err
	}
	if err := a.openLimits(ctx); err != nil {
		return err
	}
	a.metrics = newMetrics(a.cfg.Registerer)
	a.presence = newPresence(a)
	a.prefetch = newPrefetch(a.cfg)
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
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("agent: bucket %s: %w", bucket, err)
		}
		if err := b.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// waitKVBackoff spaces waitKV's tries: 100ms doubling to 2s.
var waitKVBackoff = retry.Exponential(100*time.Millisecond, 2*time.Second)

// consume runs the pull loop (pull.go) with Concurrency workers.
func (a *Agent) consume(ctx context.Context, cons jetstream.Consumer) error {
	// workCtx outlives ctx by up to ShutdownTimeout so in-flight items can finish.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	ackDone := make(chan struct{})
	go a.batchLoop()
	go func() { defer close(ackDone); a.ackLoop() }()

	buf := make(chan jetstream.Msg, a.prefetch.max)
	taken := make(chan struct{}, 1)
	slots := make([]hbSlot, a.cfg.Concurrency)
	stopHB := a.heartbeats(slots)
	defer stopHB()
	var workers sync.WaitGroup
	for i := 0; i < a.cfg.Concurrency; i++ {
		workers.Add(1)
		slot := &slots[i]
		go func() {
			defer workers.Done()
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
				_, job, _ := a.names.ParseWork(m.Subject())
				a.metrics.inFlight.Inc()
				a.presence.begin(job)
				t0 := time.Now()
				a.safeProcessOn(workCtx, m, slot)
				a.prefetch.observe(time.Since(t0))
				a.presence.end(job)
				a.metrics.inFlight.Dec()
			}
		}()
	}

	pullErr := a.pull(ctx, cons, buf, taken)
	close(buf)

	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(a.cfg.ShutdownTimeout):
		a.log.Warn().Dur("timeout", a.cfg.ShutdownTimeout).Msg("shutdown timeout: cancelling in-flight items")
		cancelWork()
		<-finished
	}
	close(a.results) // the batcher publishes what it holds, then closes a.acks
	<-ackDone
	if pullErr != nil && ctx.Err() == nil {
		return fmt.Errorf("agent: pull: %w", pullErr)
	}
	return nil
}
