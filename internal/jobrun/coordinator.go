package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/jspub"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/pause"
	"github.com/jetfleet/jetfleet/internal/poolset"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/replay"
	"github.com/jetfleet/jetfleet/internal/retention"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/scheduler"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// intakeConsumer is the durable consumer of the jobs stream.
const intakeConsumer = "coordinator"

// Coordinator accepts, publishes and tracks jobs. Build it with New and
// start it with Run. Its methods are safe for concurrent use.
type Coordinator struct {
	// probe, when set (tests), replaces the API's check that the
	// coordinator reaches the cluster (api.go).
	probe func(context.Context) error
	// testEndpoints, set by tests before Run, are served beside the API's.
	testEndpoints map[string]endpointFunc
	// cutOff notices, from failing health checks, a server cut off the
	// cluster (internal/api).
	cutOff natsconn.CutOff
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	names  messages.Names
	log    zerolog.Logger
	store  *jobStore
	index  *jobIndex // job summaries for jobs.list (index.go)
	// agents are the handlers present agents announce (agents.go).
	agents *agentDirectory
	budget *budget.Budget
	opener expand.Opener
	// budgetKV is the budget bucket (a rejected job's leftover budget is
	// deleted when its id is taken again).
	budgetKV jetstream.KeyValue
	// intakeErrs remembers why durable submissions failed (intakeOne).
	intakeErrs intakeErrors
	// beforeCount, when set, runs before a durable submission's items are
	// read (tests: a crash or a panic during expansion).
	beforeCount func(job string)

	// pools knows the work stream's pools (internal/poolset).
	pools *poolset.Set
	// slots counts the durable submissions being accepted (pools.go).
	slots openSlots
	// priorities counts the jobs publishing in each pool by priority
	// (priority.go).
	priorities priorities

	// breakers is the circuit-breaker bucket the agents write, read for status.
	breakers jetstream.KeyValue
	// tr records the coordinator's spans (tracing.go); off when zero.
	tr tracing.Tracer

	metrics *metrics
	dlq     *dlqService // the DLQ's inspector, replayer, metrics (dlqapi.go)
	// schedules serves the schedules.* endpoints and fires the ticks
	// while this coordinator leads (internal/scheduler).
	schedules *scheduler.Scheduler
	// retention cleans up settled jobs and deletes expired ones while
	// this coordinator leads, and serves jobs.prune (internal/retention).
	retention *retention.Retention
	// replays are the DLQ replays (internal/replay), made by Run once the
	// control bucket is open; nil before.
	replays *replay.Replays
	// streams caches stream handles by name and purges (streams.go).
	streams streamCache
	// specs are the pools' specs buckets (specs.go).
	specs specBuckets

	// work publishes work messages (the publishers of every job).
	work *jspub.Publisher

	// control is the bucket coordinators share: the lease, replays,
	// cancel requests; itemsKV the items' retry states (the DLQ mover).
	control jetstream.KeyValue
	itemsKV jetstream.KeyValue
	// pauseKV is the pause bucket, pauses this coordinator's view of it,
	// releaseNow the nudge of the leader's releaser (pause.go).
	pauseKV    jetstream.KeyValue
	pauses     *pause.View
	releaseNow chan struct{}
	lease      *lease.Lease
	// submitFull remembers the intake's refusal of a submission for want
	// of room (storeFullErr).
	submitFull natsconn.FullStore
	// fail ends Run with an error (the intake lost its connection).
	fail context.CancelCauseFunc
	// components run in every leadership term (OnLeader).
	components []component

	mu      sync.Mutex
	runners map[string]*jobRunner
	// setups are the jobs whose setup runner runs, each with the func
	// that stops it (setup.go).
	setups map[string]context.CancelFunc
	// runCtx is the current leadership term's context; nil while this
	// coordinator does not lead. wg counts the term's goroutines (runners,
	// intake, mover, replays, components); bg those that run whether or not
	// it leads (API-side watches).
	runCtx context.Context
	hub    *resultsHub // the term's results consumer (results.go)
	wg     sync.WaitGroup
	bg     sync.WaitGroup
	ready  chan struct{}
}

// New returns a coordinator using nc. It does not touch the server until Run.
func New(nc *nats.Conn, cfg Config) (*Coordinator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: config: %w", err)
	}
	names, err := messages.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("coordinator: config: %w", err)
	}
	js, err := natsconn.JetStream(nc, cfg.JSDomain, jetstream.WithPublishAsyncTimeout(10*time.Second), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c := &Coordinator{
		cfg:     cfg,
		nc:      nc,
		js:      js,
		names:   names,
		log:     cfg.Logger.With().Str("component", "coordinator").Logger(),
		runners: map[string]*jobRunner{},
		ready:   make(chan struct{}),
		pauses:  pause.NewView(),
		// releaseNow: a resume asks the leader to move held items back.
		releaseNow: make(chan struct{}, 1),
	}
	c.streams.js = js
	// The denials turn the server's refusals of the coordinator's
	// requests into answers.
	c.pools = poolset.New(poolset.Config{JetStream: js, Names: names, Denials: natsconn.WatchDenials(nc), Streams: &c.streams,
		Provision: cfg.Provision.config(), Configured: cfg.Pools, MaxPools: cfg.MaxPools})
	c.opener = expand.NewOpener(cfg.InputDir, js)
	c.tr = tracing.New(cfg.TracerProvider)
	c.metrics = newMetrics(cfg.Registerer, c.totalInFlight)
	c.dlq = newDLQService(dlqDeps{nc: nc, js: js, names: names, clock: cfg.hooks.Clock, log: c.log,
		reopen: c.reopenForReplay, route: c.routeReplay, signer: c.signer(), registerer: cfg.Registerer})
	c.schedules = scheduler.New(scheduler.Config{JetStream: js, Names: names, Jobs: scheduleJobs{c},
		Clock: cfg.hooks.Clock, Logger: c.log, MaxPerPool: cfg.MaxSchedulesPerPool})
	c.retention = retention.New(retention.Config{JetStream: js, Names: names, Jobs: retentionJobs{c}, Streams: &c.streams,
		Clock: cfg.hooks.Clock, Logger: c.log, Cleaned: c.metrics.jobsCleaned, Pruned: c.metrics.jobsPruned,
		JobRetention: cfg.JobRetention, CleanupInterval: cfg.CleanupInterval,
		LateResultWindow: cfg.LateResultWindow, PruneMarkerTTL: cfg.PruneMarkerTTL})
	return c, nil
}

// Ready is closed once Run has provisioned resources and serves the API
// (whether or not this coordinator leads).
func (c *Coordinator) Ready() <-chan struct{} { return c.ready }

// Run provisions resources, serves the API until ctx is cancelled, and
// campaigns for the prefix's leadership: while this coordinator leads it
// resumes unfinished jobs and runs the durable intake, the job runners,
// the DLQ mover and replays (lead, leader.go). It then stops and waits for
// its goroutines. Unfinished jobs are resumed by the next leader.
func (c *Coordinator) Run(ctx context.Context) error {
	// No responders (a wrong --js-domain, JetStream not up yet) is waited
	// out with a warning that says what to check, not an exit.
	reach := natsconn.Reacher{Logger: c.log, Domain: c.cfg.JSDomain}
	if err := reach.Reach(ctx, "provisioning streams and buckets", func(ctx context.Context) error {
		return provision.Ensure(ctx, c.js, c.names, c.cfg.Provision.config())
	}); err != nil {
		return err
	}
	kv, err := c.js.KeyValue(ctx, c.names.JobsBucket())
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.index = newJobIndex()
	c.store = &jobStore{kv: kv, leader: kvleader.New(c.js, c.names.JobsBucket()).Get, index: c.index, maxBytes: func() int { return c.maxPayload() - messageRoom }}
	bkv, err := c.js.KeyValue(ctx, c.names.BudgetBucket())
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.budgetKV = bkv
	bopts := []budget.Option{budget.WithLogger(c.log), budget.WithJetStream(c.js)}
	if c.cfg.Registerer != nil {
		bopts = append(bopts, budget.WithRegisterer(c.cfg.Registerer))
	}
	if c.budget, err = budget.New(bkv, bopts...); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	defer func() { _ = c.budget.Close() }()
	if c.breakers, err = c.js.KeyValue(ctx, c.names.BreakerBucket()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if c.control, err = c.js.KeyValue(ctx, c.names.ControlBucket()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.replays = replay.New(replay.Config{JetStream: c.js, Names: c.names, Control: c.control,
		Replayer: c.dlq.rep, Metrics: c.dlq.metrics, Jobs: replayJobs{c}, Clock: c.cfg.hooks.Clock, Logger: c.log})
	if c.itemsKV, err = c.js.KeyValue(ctx, c.names.ItemsBucket()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if c.pauseKV, err = c.js.KeyValue(ctx, c.names.PauseBucket()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if c.work, err = jspub.New(c.nc); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	defer c.work.Close()
	ls, err := lease.New(lease.Config{
		Store: c.control, Reader: stampedReader{kvleader.New(c.js, c.names.ControlBucket()), c.cfg.hooks.Clock}, Key: wire.LeaseKey,
		// The lease runs on real time, never on the configured clock: a test that
		// moves the jobs' clock must not move the leader's liveness with it.
		Holder: c.cfg.Holder, TTL: c.cfg.LeaseTTL, Logger: c.log,
	})
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.lease = ls

	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	c.fail = fail
	server := c.newAPIServer(ctx)
	if err := server.Start(); err != nil {
		return err
	}
	c.agents = newAgentDirectory()
	c.bg.Add(5)
	go func() {
		defer c.bg.Done()
		c.index.keep(ctx, kv, c.log)
	}()
	go func() {
		defer c.bg.Done()
		c.pauses.Keep(ctx, c.pauseKV, c.log, c.pauseChanged)
	}()
	go func() {
		defer c.bg.Done()
		c.agents.keep(ctx, c.js, c.names.AgentsBucket(), c.log)
	}()
	go func() {
		defer c.bg.Done()
		server.KeepServing(ctx)
	}()
	go func() {
		defer c.bg.Done()
		c.replays.Keep(ctx)
	}()
	// The API's subscriptions reach the server before Ready says so.
	if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
		fail(nil)
		server.Close()
		c.bg.Wait()
		return fmt.Errorf("coordinator: %w", err)
	}
	close(c.ready)
	c.log.Info().Str("prefix", c.cfg.Prefix).Str("holder", c.cfg.Holder).Msg("coordinator running; campaigning for leadership")

	_ = ls.Run(ctx, c.lead)
	fail(nil)
	server.Close()
	c.bg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// resume restarts the runners of every unfinished job.
func (c *Coordinator) resume(ctx context.Context) error {
	recs, err := c.store.list(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: listing jobs: %w", err)
	}
	for _, rec := range recs {
		if c.runner(rec.Status.ID) == nil && !messages.TerminalState(rec.Status.State) && rec.Spec != nil {
			c.log.Info().Str("job_id", rec.Status.ID).Int64("cursor", rec.Cursor).Msg("resuming job")
			c.startRunner(rec.JobRecord, rec.rev)
		}
	}
	return nil
}

// startRunner starts the runner of a job whose record is at revision rev,
// if this coordinator leads and runs none for it.
func (c *Coordinator) startRunner(rec wire.JobRecord, rev uint64) {
	if rec.Status.Phase == messages.PhaseSetup {
		c.startSetup(rec, rev) // its items are not known yet (setup.go)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx := c.runCtx
	if _, running := c.runners[rec.Status.ID]; running || ctx == nil || ctx.Err() != nil {
		return
	}
	r := newJobRunner(c, rec, rev)
	r.hub = c.hub
	c.runners[rec.Status.ID] = r
	c.metrics.activeJobs.Inc()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.runners, r.id)
			c.mu.Unlock()
			c.metrics.activeJobs.Dec()
		}()
		if shares, err := c.migrateBudget(ctx, &rec); err != nil {
			r.log.Warn().Err(err).Msg("cannot move the budget of a job of an earlier version to its pools' keys; its retries wait")
		} else if shares != nil {
			r.mu.Lock()
			r.rec.BudgetShares = shares
			r.dirty = true
			r.mu.Unlock()
			rec.BudgetShares = shares // for the spec records
		}
		if rec.Status.Published > 0 {
			// A job this leader resumes: the leader that published its
			// items wrote its spec records first. Write them again in the
			// background (a job of an earlier release has none; its
			// agents nak until they are there), so that a specs bucket
			// whose stream leader was on a node just cut off does not
			// hold up the job's results and status (TestCutOffCoordinatorHandsOver).
			c.wg.Add(1)
			go func(rec wire.JobRecord) {
				defer c.wg.Done()
				c.ensureSpecs(ctx, r, &rec)
			}(rec)
		} else {
			c.ensureSpecs(ctx, r, &rec)
		}
		if !c.runJob(ctx, r) {
			return
		}
		if rec := r.snapshot(); messages.TerminalState(rec.Status.State) {
			c.forgetBudgets(&rec)
		}
	}()
}

// runJob runs a job's runner. A panic there (a bug some job found) fails
// that job with the reason, instead of ending the coordinator, which would
// resume the job and panic again after every restart. It reports whether
// the runner returned normally.
func (c *Coordinator) runJob(ctx context.Context, r *jobRunner) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error().Str("job_id", r.id).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("job runner panicked; the job fails")
			c.failJob(ctx, r.id, fmt.Sprintf("internal_error: %v", p))
		}
	}()
	r.run(ctx)
	return true
}

// failJob ends a job whose runner cannot go on: items without an outcome
// count as not run, so the counts still add up.
func (c *Coordinator) failJob(runCtx context.Context, id, reason string) {
	if runCtx.Err() != nil {
		return // not the leader any more: the next one runs the job again
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 10*time.Second)
	defer cancel()
	rec, err := c.store.get(ctx, id)
	if err != nil {
		c.log.Error().Err(err).Str("job_id", id).Msg("cannot record the job's failure")
		return
	}
	now := c.cfg.hooks.Clock.Now()
	st := &rec.Status
	st.State, st.CompletionReason, st.Phase, st.FinishedAt = messages.StateFailed, reason, messages.PhaseDone, &now
	st.NotRun += max(st.Items-st.Done(), 0)
	if err := c.store.put(ctx, rec); err != nil {
		c.log.Error().Err(err).Str("job_id", id).Msg("cannot record the job's failure")
	}
}

func (c *Coordinator) runner(id string) *jobRunner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runners[id]
}

func (c *Coordinator) totalInFlight() float64 {
	c.mu.Lock()
	rs := make([]*jobRunner, 0, len(c.runners))
	for _, r := range c.runners {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	var n int64
	for _, r := range rs {
		n += r.inFlight()
	}
	return float64(n)
}

// intakeAckWait is the intake consumer's AckWait: how long a submission
// stays with a coordinator that stopped answering for it (heartbeats keep
// a long acceptance alive). A variable for tests.
var intakeAckWait = 30 * time.Second

// The intake takes in every submission it pulls, within intakeReadAhead
// bytes (each counted as at least intakeMinWeight), so that a slow
// submission (a large input to count) or a burst of bad ones holds back
// no other: those refused for what they are (a bad spec, a pool they may
// not use) are written by at most intakeRefusals at a time, leaving the
// server's time to the good ones, and at most intakeWorkers are accepted
// at once. The pulls ahead hold at most intakeReadAhead bytes too.
const (
	intakeWorkers   = 64
	intakeRefusals  = 16
	intakeReadAhead = 64 << 20
	intakeMinWeight = 16 << 10
)

// intake consumes the durable jobs stream, up to intakeWorkers
// submissions at a time; submissions that name the same job id are
// accepted one after the other (intakeLocks).
func (c *Coordinator) intake(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.names.JobsStream(), jetstream.ConsumerConfig{
		Durable:     intakeConsumer,
		Description: "jetfleet coordinator intake",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     intakeAckWait,
	})
	if err != nil {
		return fmt.Errorf("coordinator: intake consumer: %w", err)
	}
	// Pulled by bytes: submissions may be as large as MaxSpecBytes.
	it, err := cons.Messages(jetstream.PullMaxBytes(intakeReadAhead), jetstream.PullExpiry(natsconn.PullExpiry), jetstream.PullHeartbeat(natsconn.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("coordinator: intake: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var wg sync.WaitGroup
	defer wg.Wait()
	var locks intakeLocks
	refusals := make(chan struct{}, intakeRefusals)
	held := semaphore.NewWeighted(intakeReadAhead)
	accepting := make(chan struct{}, intakeWorkers)
	for {
		m, err := it.Next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case c.nc.IsClosed():
				return fmt.Errorf("coordinator: intake: %w", natsconn.Lost(c.nc))
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return nil
			}
			c.log.Warn().Err(err).Msg("intake pull failed")
			continue
		}
		// The submissions being taken in hold at most intakeReadAhead
		// bytes between them, each at least intakeMinWeight (a larger
		// one, that much alone).
		size := min(max(int64(len(m.Data())), intakeMinWeight), intakeReadAhead)
		if err := held.Acquire(ctx, size); err != nil {
			return nil // shutting down: unacknowledged, it comes back
		}
		wg.Add(1)
		t := c.slots.ticket()
		go func() {
			defer wg.Done()
			defer held.Release(size)
			defer c.slots.drop(t) // let the next in, whatever happened
			c.intakeOne(ctx, m, t, &locks, refusals, accepting)
		}()
	}
}

// intakeKey is the job id a durable submission names, or its stream
// sequence when it names none: submissions with the same key are accepted
// one at a time.
func intakeKey(m jetstream.Msg) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(m.Data(), &probe) == nil && probe.ID != "" {
		return probe.ID
	}
	if md, err := m.Metadata(); err == nil {
		return "#" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return ""
}

// intakeLocks serialises the acceptance of submissions that share a key.
// Safe for concurrent use.
type intakeLocks struct {
	mu   sync.Mutex
	held map[string]*intakeLock
}

type intakeLock struct {
	mu    sync.Mutex
	users int
}

// lock waits until no other submission with key is being accepted; the
// returned func lets the next one go.
func (l *intakeLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.held == nil {
		l.held = map[string]*intakeLock{}
	}
	e := l.held[key]
	if e == nil {
		e = &intakeLock{}
		l.held[key] = e
	}
	e.users++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.held, key)
		}
		l.mu.Unlock()
	}
}

// intakeOne accepts one durable submission, or rejects it. A submission
// that fails to be accepted IntakeMaxDeliveries times — an error each
// time, or a coordinator that died while accepting it (out of memory, a
// crash), which would otherwise repeat after every restart — is recorded
// as rejected with the reason, and never tried again.
//
// A submission refused for what it is (a bad spec, a pool it may not use)
// is refused at once, with no open slot, among at most intakeRefusals
// refusals written at a time; any other waits for its turn (intakeGate):
// t is its place in the intake's queue (openSlots.ticket), and
// submissions that name the same job id (locks) are accepted one at a
// time.
func (c *Coordinator) intakeOne(ctx context.Context, m jetstream.Msg, t uint64, locks *intakeLocks, refusals, accepting chan struct{}) {
	if c.leaveNewerSubmission(m) {
		return
	}
	ctx, span := c.traceAccept(ctx, m.Headers())
	defer span.End()
	var seq, delivered uint64 = 0, 1
	if md, err := m.Metadata(); err == nil {
		seq, delivered = md.Sequence.Stream, md.NumDelivered
		clock.Observe(c.cfg.hooks.Clock, md.Timestamp)
	}
	stop := inProgress(m, intakeAckWait/3)
	defer stop()
	maxTries := uint64(c.cfg.IntakeMaxDeliveries)
	g := intakeGate{refusals: refusals, enter: func() (func(), error) {
		release, err := c.waitOpenSlot(ctx, t)
		if err != nil {
			return nil, err
		}
		select {
		case accepting <- struct{}{}:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
		unlock := locks.lock(intakeKey(m))
		return func() { unlock(); <-accepting; release() }, nil
	}}
	if delivered <= maxTries {
		err := c.safeAccept(ctx, m.Data(), seq, g)
		if err == nil {
			c.intakeErrs.forget(seq)
			_ = m.Ack()
			return
		}
		if ctx.Err() != nil {
			return // shutting down: the next coordinator tries again
		}
		c.intakeErrs.set(seq, err)
		c.log.Error().Err(err).Uint64("stream_seq", seq).Uint64("num_delivered", delivered).Msg("accepting job failed")
		if delivered < maxTries {
			_ = m.NakWithDelay(intakeBackoff.Delay(int(delivered), 0, nil))
			return
		}
	}
	why := "the coordinator stopped or died while accepting it (out of memory?)"
	if last := c.intakeErrs.get(seq); last != "" {
		why = last
	}
	tries := min(delivered, maxTries)
	problems := []messages.FieldError{{Message: fmt.Sprintf("not accepted after %d attempts: %s", tries, why)}}
	if err := c.reject(ctx, seq, rejectedID(m.Data(), seq, c.cfg.MaxSpecBytes), problems, c.cfg.hooks.Clock.Now()); err != nil {
		c.log.Error().Err(err).Uint64("stream_seq", seq).Msg("recording the rejection failed; will retry")
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	c.intakeErrs.forget(seq)
	_ = m.Ack()
}

// intakeBackoff spaces the deliveries of a submission that failed to be
// accepted: 2s doubling to a minute.
var intakeBackoff = retry.Exponential(2*time.Second, time.Minute)

// safeAccept is accept; a panic there (a bug some spec found) counts as a
// failed attempt, so the submission ends rejected with the reason.
func (c *Coordinator) safeAccept(ctx context.Context, data []byte, seq uint64, g intakeGate) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Uint64("stream_seq", seq).Msg("accepting a job panicked")
			err = fmt.Errorf("internal error: %v", p)
		}
	}()
	return c.accept(ctx, data, seq, g)
}

// intakeGate is how a durable submission's acceptance waits: enter waits
// for its turn (an open slot, and its job id's; the returned func ends
// it), refusals bounds the rejections written at once. The zero gate
// waits for nothing.
type intakeGate struct {
	enter    func() (leave func(), err error)
	refusals chan struct{}
}

// refuse writes a rejection among the gate's refusals.
func (g intakeGate) refuse(ctx context.Context, reject func() error) error {
	if g.refusals != nil {
		select {
		case g.refusals <- struct{}{}:
			defer func() { <-g.refusals }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reject()
}

// inProgress tells the server every interval that m is still being worked
// on, until the returned func is called.
func inProgress(m jetstream.Msg, every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// intakeErrors remembers why recent submissions failed, for the reason of
// their rejection. Safe for concurrent use.
type intakeErrors struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (e *intakeErrors) set(seq uint64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) > 1000 {
		e.m = map[uint64]string{}
	}
	e.m[seq] = err.Error()
}

func (e *intakeErrors) get(seq uint64) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[seq]
}

func (e *intakeErrors) forget(seq uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, seq)
}

// accept turns one durable submission into a job. A returned error means
// "retry later" (NATS trouble); a submission that fails a check is
// recorded as rejected with its problems. It applies every check the API
// applies (admitSpec), and those only the items can answer (countItems).
func (c *Coordinator) accept(ctx context.Context, data []byte, seq uint64, g intakeGate) error {
	now := c.cfg.hooks.Clock.Now()
	spec, problems := c.admitSpec(data)
	if spec == nil {
		return g.refuse(ctx, func() error { return c.reject(ctx, seq, rejectedID(data, seq, c.cfg.MaxSpecBytes), problems, now) })
	}
	if len(problems) > 0 {
		id := spec.ID
		if id == "" {
			id = "rejected-" + strconv.FormatUint(seq, 10)
		}
		return g.refuse(ctx, func() error { return c.reject(ctx, seq, id, problems, now) })
	}
	if spec.ID == "" {
		spec.ID = "job-" + strconv.FormatUint(seq, 10)
	}
	// A pool the job may not use is refused first: it needs no read of
	// the job's record (reject makes sure it overwrites no accepted job).
	eff := jobspec.WithDefaults(spec)
	fe, err := c.pools.Check(ctx, eff.Pool)
	if err != nil {
		return err
	}
	if fe == nil {
		fe = c.teamProblem(eff) // a team's job on its team's pools only (teams.go)
	}
	if fe != nil {
		return g.refuse(ctx, func() error { return c.rejectTeam(ctx, seq, spec.ID, spec.Team, []messages.FieldError{*fe}, now) })
	}
	if g.enter != nil {
		leave, err := g.enter()
		if err != nil {
			return err
		}
		defer leave()
	}
	// An existing job makes this an idempotent resubmission, unless it was
	// rejected: then the id is free and this submission replaces it.
	prev, rev, err := c.store.getRev(ctx, spec.ID)
	switch {
	case err == nil && prev.Status.State != messages.StateRejected:
		if !messages.TerminalState(prev.Status.State) && prev.Spec != nil {
			// Accepted by a leader that died before starting it.
			c.startRunner(*prev, rev)
		}
		return nil
	case err != nil && !errors.Is(err, errNoJob):
		return err
	}
	if needsSetup(eff) {
		return c.acceptSetup(ctx, seq, spec, eff, rev, now) // setup.go
	}
	if problems := c.checkInput(eff); len(problems) > 0 {
		return c.rejectTeam(ctx, seq, spec.ID, spec.Team, problems, now)
	}
	if problems := c.handlerProblems(ctx, eff); len(problems) > 0 {
		return c.rejectTeam(ctx, seq, spec.ID, spec.Team, problems, now)
	}
	if problems, err := c.adoptInput(ctx, eff); err != nil {
		return fmt.Errorf("input of %s: %w", spec.ID, err)
	} else if len(problems) > 0 {
		return c.rejectTeam(ctx, seq, spec.ID, spec.Team, problems, now)
	}
	if c.beforeCount != nil {
		c.beforeCount(spec.ID)
	}
	total, groups, problems, err := c.countItems(ctx, eff)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return c.rejectTeam(ctx, seq, spec.ID, spec.Team, problems, now)
	}
	rec := wire.JobRecord{
		Spec: eff,
		Status: messages.JobStatus{
			ID: spec.ID, Name: eff.Name, Pool: eff.Pool, Team: eff.Team, State: messages.StatePending,
			Items: total, SubmittedAt: now,
		},
		SubmitSeq: seq,
	}
	holdAtAcceptance(&rec, now) // not_before (notbefore.go)
	if problems, err := c.itemsAccepted(ctx, spec.BestEffort, &rec, total, groups, now); err != nil {
		return err
	} else if len(problems) > 0 {
		return c.rejectTeam(ctx, seq, spec.ID, spec.Team, problems, now)
	}
	traceAccepted(ctx, &rec)
	nrev, _, err := c.store.update(ctx, &rec, rev)
	if err != nil {
		return err
	}
	if nrev == 0 {
		return nil
	}
	if spec.Input != eff.Input {
		c.dropUpload(ctx, spec.Input) // the job reads its own copy
	}
	c.metrics.jobsAccepted.Inc()
	c.log.Info().Str("job_id", spec.ID).Int64("items", total).Bool("replaces_rejected", rev != 0).Msg("job accepted")
	c.event(spec.ID, messages.JobSubmittedEvent{Items: total, Pool: eff.Pool})
	c.startRunner(rec, nrev)
	return nil
}

// recordSize is the encoded size of rec.
func recordSize(rec *wire.JobRecord) int {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0
	}
	return len(data)
}

// bestEffortStatus clamps min_groups to [1, groups] and records the clamp.
func bestEffortStatus(requested, eff *messages.BestEffort, groups int) *messages.BestEffortStatus {
	groups = max(groups, 1) // an empty job still has its one (empty) group
	be := &messages.BestEffortStatus{
		MinGroups: eff.MinGroups, RequestedMinGroups: requested.MinGroups,
		Groups: groups, LateResults: eff.LateResults, DeadlineAfter: eff.Deadline,
	}
	if requested.Deadline != 0 {
		be.RequestedDeadline = requested.Deadline.String()
	}
	switch {
	case be.MinGroups < 1:
		be.MinGroups, be.Clamped = 1, fmt.Sprintf("min_groups %d raised to 1", eff.MinGroups)
	case be.MinGroups > groups:
		be.MinGroups, be.Clamped = groups, fmt.Sprintf("min_groups %d lowered to the job's %d groups", eff.MinGroups, groups)
	}
	return be
}

// routes sends each group's items to the pool of that name when such a
// pool has a consumer; other groups use the job's pool.
func (c *Coordinator) routes(ctx context.Context, spec *messages.JobSpec, groups map[string]int64) map[string]string {
	if spec.GroupBy == "" {
		return nil
	}
	routes := map[string]string{}
	for g := range groups {
		if g == spec.Pool || messages.ValidPool(g) != nil || !c.teamMayRoute(spec.Team, g) {
			continue
		}
		if _, err := c.js.Consumer(ctx, c.names.WorkStream(), c.names.AgentsConsumer(g)); err == nil {
			routes[g] = g
		}
	}
	return routes
}

// ensurePools makes the work consumer and the park stream of the job's
// pool and of the pools its groups are routed to. A park stream that
// cannot be made (a pool the coordinator's permissions do not name) is
// logged: that pool's agents then retry in delayed naks instead of
// parking.
func (c *Coordinator) ensurePools(ctx context.Context, pool string, routes map[string]string) error {
	pools := []string{pool}
	for _, p := range routes {
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	for _, p := range pools {
		err := c.pools.Ensure(ctx, p)
		if errors.Is(err, provision.ErrDLQReservation) {
			// The error names the quota, what is reserved already and
			// the ways out (docs/dlq.md, "Each pool's quota is reserved").
			c.log.Error().Err(err).Str("pool", p).Msg("no dead-letter stream for the pool: its agents dead-letter into the DLQ stream itself")
			continue
		}
		if errors.Is(err, provision.ErrParkStream) {
			c.log.Warn().Err(err).Str("pool", p).Msg("no park stream for the pool; its agents retry in delayed naks")
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reject records the submission at seq as rejected with its problems. It never
// overwrites a job that was accepted; it replaces an earlier rejection.
func (c *Coordinator) reject(ctx context.Context, seq uint64, id string, problems []messages.FieldError, now time.Time) error {
	return c.rejectTeam(ctx, seq, id, "", problems, now)
}

// rejectTeam is reject of a submission of a team (teams.go), whose record
// that team may then read; team "" is none.
func (c *Coordinator) rejectTeam(ctx context.Context, seq uint64, id, team string, problems []messages.FieldError, now time.Time) error {
	problems = boundProblems(problems)
	rec := wire.JobRecord{Status: messages.JobStatus{
		ID: id, Team: team, State: messages.StateRejected, Problems: problems, SubmittedAt: now, FinishedAt: &now,
	}, SubmitSeq: seq}
	// Most rejected ids are new: one write, and a read only when the id
	// is taken.
	created, err := c.store.replace(ctx, &rec, 0)
	if err != nil {
		return err
	}
	if !created {
		prev, rev, err := c.store.getRev(ctx, id)
		switch {
		case err == nil && prev.Status.State != messages.StateRejected:
			return nil
		case err != nil && !errors.Is(err, errNoJob):
			return err
		}
		if created, err = c.store.replace(ctx, &rec, rev); err != nil {
			return err
		}
	}
	if created {
		c.metrics.jobsRejected.Inc()
		ev := c.log.Warn().Str("job_id", id).Int("problems", len(problems))
		if len(problems) > 0 {
			ev = ev.Str("problem", problems[0].Error())
		}
		ev.Msg("durable submission rejected")
		c.event(id, messages.JobRejectedEvent{Problems: problems})
	}
	return nil
}

// rejectedID picks the id under which a rejected submission is recorded:
// its own id when that is a valid token, else "rejected-<seq>". A
// submission over maxSpec bytes is not parsed for it (only probed as JSON).
func rejectedID(data []byte, seq uint64, maxSpec int) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &probe) == nil && messages.ValidToken(probe.ID) == nil {
		return probe.ID
	}
	if len(data) <= maxSpec {
		if spec, err := jobspec.Parse(data); err == nil && spec.ID != "" {
			return spec.ID
		}
	}
	return "rejected-" + strconv.FormatUint(seq, 10)
}

func problemsOf(err error) []messages.FieldError {
	var ve *messages.ValidationError
	if errors.As(err, &ve) {
		return ve.Problems
	}
	return []messages.FieldError{{Message: err.Error()}}
}

// Status returns a job's current status.
func (c *Coordinator) Status(ctx context.Context, id string) (*messages.JobStatus, error) {
	// A runner still replaying the job's results (a new leader's) has
	// counted only part of them: the record, written by the last runner
	// that had caught up, is newer (the faults run saw a status of 0 done
	// after 2,212 from a runner just started).
	// A leader paused past its lease (docker pause, a stopped VM) has a
	// runner whose counts stopped when it did, while the next leader's
	// moved on: until it renews, the record (with its as_of) answers.
	if r := c.runner(id); r != nil && r.replayed() && c.lease != nil && c.lease.Current() {
		rec := r.snapshot()
		c.fillBudget(ctx, &rec)
		st := rec.Status
		st.Source = messages.StatusFromRunner
		return &st, nil
	}
	// From the stream leader, never a replica: a lagging or cut-off
	// replica may serve counts older than what a client has been shown
	// (docs/design.md, "Status never goes back"). With the leader out of
	// reach the read fails, and the API says unavailable: the client asks
	// again, elsewhere.
	rec, err := c.store.getFromLeader(ctx, id)
	if err != nil {
		return nil, err
	}
	rec.Status.Source = messages.StatusFromRecord
	return &rec.Status, nil
}

// JobCancel stops a running job: queued items are removed and counted as
// not_run; in-flight ones may still finish, unless WithKill is given: then
// the agents terminate them, and they stay not_run. The state becomes
// cancelled. With WithKill, a job that was cancelled before is not an
// error: its running steps are killed.
func (c *Coordinator) JobCancel(ctx context.Context, id string, opts ...CancelOption) (*messages.JobStatus, error) {
	req := messages.CancelRequest{JobID: id}
	for _, o := range opts {
		o(&req)
	}
	var (
		st  *messages.JobStatus
		err error
	)
	if s, ok, err := c.setupCancel(ctx, id, req.Kill); ok {
		return s, err // in its setup phase (setup.go)
	}
	if r := c.runner(id); r != nil {
		var s messages.JobStatus
		s, err = r.stop(ctx, stopRequest{state: messages.StateCancelled, reason: messages.CompletionCancelled, kill: req.Kill})
		st = &s
	} else {
		// Another coordinator leads (or this one has not started the job
		// yet): a durable request (leader.go).
		st, err = c.requestCancel(ctx, req)
	}
	if errors.Is(err, errJobFinished) && req.Kill && st != nil && st.MapReason == messages.CompletionCancelled {
		// Cancelled before without kill: its steps may still run.
		c.killRunning(id, st)
		return st, nil
	}
	return st, err
}

// killRunning tells the agents to terminate the running steps of job id,
// whose map phase ended as st says: a map_ended event with kill set.
func (c *Coordinator) killRunning(id string, st *messages.JobStatus) {
	c.log.Info().Str("job_id", id).Msg("killing the running steps of the job")
	c.event(id, messages.MapPhaseEndedEvent{State: st.MapState, Reason: st.MapReason, Kill: true})
}

// stampedReader reads the lease key from the stream leader and passes its
// stamp to the coordinator's clock (clock.Observe): a coordinator knows the
// server's time from its first read of the lease, before it can lead
// (docs/design.md, "Clocks").
type stampedReader struct {
	r   kvleader.Reader
	clk clock.Clock
}

func (s stampedReader) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	data, rev, stored, err := s.r.GetStamped(ctx, key)
	clock.Observe(s.clk, stored)
	return data, rev, err
}

// CancelOption changes what Cancel does: [WithKill].
type CancelOption = client.CancelOption
