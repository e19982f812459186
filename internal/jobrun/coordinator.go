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

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/intake"
	"github.com/jetfleet/jetfleet/internal/jspub"
	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/pause"
	"github.com/jetfleet/jetfleet/internal/poolset"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/replay"
	"github.com/jetfleet/jetfleet/internal/retention"
	"github.com/jetfleet/jetfleet/internal/scheduler"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Coordinator accepts, publishes and tracks jobs. Build it with New and
// start it with Run. Its methods are safe for concurrent use.
type Coordinator struct {
	// probe, when set (tests), replaces the API's check that the
	// coordinator reaches the cluster (apijobs.go).
	probe func(context.Context) error
	// testEndpoints, set by tests before Run, are served beside the API's.
	testEndpoints map[string]endpointFunc
	// replica, when set (tests), is the results stream as the catch-ups
	// and the setup's read read it (results.go, setup.go): one a lagging
	// replica serves.
	replica func(jetstream.Stream) jetstream.Stream
	// hubOpts, when set (tests), are the results hub's seams: the stream
	// its own consumer reads, the clock of its watch (results.go).
	hubOpts hubOptions
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
	// beforeCount, when set, runs before a durable submission's items are
	// read (tests: a crash or a panic during expansion).
	beforeCount func(job string)

	// pools knows the work stream's pools (internal/poolset).
	pools *poolset.Set
	// intake takes in the durable submissions and counts the open jobs
	// (internal/intake, intake.go).
	intake *intake.Intake
	// priorities counts the jobs publishing in each pool by priority
	// (priority.go).
	priorities priorities

	// breakers is the circuit-breaker bucket the agents write, read for status.
	breakers jetstream.KeyValue
	// tr records the coordinator's spans (tracing.go); off when zero.
	tr tracing.Tracer

	metrics *metrics
	dlq     *dlqService // the DLQ's inspector, replayer, metrics (dlqservice.go)
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
	c.intake = c.newIntake()
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

// accept turns one durable submission into a job. A returned error means
// "retry later" (NATS trouble); a submission that fails a check is
// recorded as rejected with its problems. It applies every check the API
// applies (admitSpec), and those only the items can answer (countItems).
func (c *Coordinator) accept(ctx context.Context, data []byte, seq uint64, g intake.Gate) error {
	now := c.cfg.hooks.Clock.Now()
	spec, problems := c.admitSpec(data)
	if spec == nil {
		return g.Refuse(ctx, func() error { return c.reject(ctx, seq, rejectedID(data, seq, c.cfg.MaxSpecBytes), problems, now) })
	}
	if len(problems) > 0 {
		id := spec.ID
		if id == "" {
			id = "rejected-" + strconv.FormatUint(seq, 10)
		}
		return g.Refuse(ctx, func() error { return c.reject(ctx, seq, id, problems, now) })
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
		return g.Refuse(ctx, func() error { return c.rejectTeam(ctx, seq, spec.ID, spec.Team, []messages.FieldError{*fe}, now) })
	}
	leave, err := g.Enter()
	if err != nil {
		return err
	}
	defer leave()
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
