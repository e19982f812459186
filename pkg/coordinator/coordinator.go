package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/budget"
	"github.com/jetfleet/jetfleet/pkg/dlq"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// intakeConsumer is the durable consumer of the jobs stream.
const intakeConsumer = "coordinator"

// Coordinator accepts, publishes and tracks jobs. Build it with New and
// start it with Run. Its methods are safe for concurrent use.
type Coordinator struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	names  messages.Names
	log    zerolog.Logger
	store  *jobStore
	budget *budget.Budget
	opener expand.Opener

	// breakers is the circuit-breaker bucket the agents write, read for status.
	breakers jetstream.KeyValue

	metrics *metrics
	dlq     *dlqService // dlq.* endpoints, replays, DLQ metrics (dlqapi.go)

	mu      sync.Mutex
	runners map[string]*jobRunner
	runCtx  context.Context
	wg      sync.WaitGroup
	ready   chan struct{}
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
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second), jetstream.WithPublishAsyncMaxPending(4096))
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
	}
	c.opener = expand.NewOpener(cfg.InputDir, js)
	c.metrics = newMetrics(cfg.Registerer, c.totalInFlight)
	c.dlq = newDLQService(c)
	return c, nil
}

// Ready is closed once Run has provisioned resources and serves the API.
func (c *Coordinator) Ready() <-chan struct{} { return c.ready }

// Run provisions resources, resumes unfinished jobs, serves the API and the
// durable intake until ctx is cancelled, then stops and waits for its
// goroutines. Unfinished jobs are resumed by the next Run.
func (c *Coordinator) Run(ctx context.Context) error {
	if err := provision.Ensure(ctx, c.js, c.names, c.cfg.Provision); err != nil {
		return err
	}
	kv, err := c.js.KeyValue(ctx, c.names.JobsBucket())
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.store = &jobStore{kv: kv}
	bkv, err := c.js.KeyValue(ctx, c.names.BudgetBucket())
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
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

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	c.runCtx = runCtx
	c.mu.Unlock()

	if err := c.resume(runCtx); err != nil {
		return err
	}
	svc, err := c.serveAPI(runCtx)
	if err != nil {
		return err
	}
	itemsKV, err := c.js.KeyValue(ctx, c.names.ItemsBucket())
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("coordinator: %w", err)
	}
	mover := dlq.NewMover(c.js, c.names, itemsKV, c.log)
	c.startDLQ(runCtx)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := mover.Run(runCtx); err != nil {
			c.log.Error().Err(err).Msg("DLQ mover stopped")
		}
	}()
	intakeDone := make(chan error, 1)
	go func() { intakeDone <- c.intake(runCtx) }()
	close(c.ready)
	c.log.Info().Str("prefix", c.cfg.Prefix).Msg("coordinator running")

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-intakeDone:
		intakeDone = nil
	}
	cancel()
	_ = svc.Stop()
	if intakeDone != nil {
		<-intakeDone
	}
	c.wg.Wait()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
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
		if !messages.TerminalState(rec.Status.State) && rec.Spec != nil {
			c.log.Info().Str("job_id", rec.Status.ID).Int64("cursor", rec.Cursor).Msg("resuming job")
			c.startRunner(*rec)
		}
	}
	return nil
}

func (c *Coordinator) startRunner(rec messages.JobRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, running := c.runners[rec.Status.ID]; running || c.runCtx == nil || c.runCtx.Err() != nil {
		return
	}
	r := newJobRunner(c, rec)
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
		if !c.runJob(r) {
			return
		}
		if st := r.snapshot().Status; messages.TerminalState(st.State) {
			c.budget.Forget(r.id)
		}
	}()
}

// runJob runs a job's runner. A panic there (a bug some job found) fails
// that job with the reason, instead of ending the coordinator, which would
// resume the job and panic again after every restart. It reports whether
// the runner returned normally.
func (c *Coordinator) runJob(r *jobRunner) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error().Str("job_id", r.id).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("job runner panicked; the job fails")
			c.failJob(r.id, fmt.Sprintf("internal_error: %v", p))
		}
	}()
	r.run(c.runCtx)
	return true
}

// failJob ends a job whose runner cannot go on: items without an outcome
// count as not run, so the counts still add up.
func (c *Coordinator) failJob(id, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.runCtx), 10*time.Second)
	defer cancel()
	rec, err := c.store.get(ctx, id)
	if err != nil {
		c.log.Error().Err(err).Str("job_id", id).Msg("cannot record the job's failure")
		return
	}
	now := c.cfg.Clock.Now()
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

// intake consumes the durable jobs stream, one submission at a time.
func (c *Coordinator) intake(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.names.JobsStream(), jetstream.ConsumerConfig{
		Durable:     intakeConsumer,
		Description: "jetfleet coordinator intake",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("coordinator: intake consumer: %w", err)
	}
	it, err := cons.Messages(natsconn.PullOptions(1)...)
	if err != nil {
		return fmt.Errorf("coordinator: intake: %w", err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
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
		md, _ := m.Metadata()
		var seq uint64
		if md != nil {
			seq = md.Sequence.Stream
		}
		if err := c.accept(ctx, m.Data(), seq); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Error().Err(err).Uint64("stream_seq", seq).Msg("accepting job failed; will retry")
			_ = m.NakWithDelay(2 * time.Second)
			continue
		}
		_ = m.Ack()
	}
}

// accept turns one durable submission into a job. A returned error means
// "retry later" (NATS trouble); invalid specs are recorded as rejected.
func (c *Coordinator) accept(ctx context.Context, data []byte, seq uint64) error {
	now := c.cfg.Clock.Now()
	spec, perr := jobspec.Parse(data)
	if perr != nil {
		return c.reject(ctx, rejectedID(data, seq), problemsOf(perr), now)
	}
	if spec.ID == "" {
		spec.ID = "job-" + strconv.FormatUint(seq, 10)
	}
	if _, err := c.store.get(ctx, spec.ID); err == nil {
		return nil // idempotent resubmission
	} else if !errors.Is(err, errNoJob) {
		return err
	}
	eff := spec.WithDefaults()
	if problems := c.checkInput(eff); len(problems) > 0 {
		return c.reject(ctx, spec.ID, problems, now)
	}
	if problems, err := c.adoptInput(ctx, eff); err != nil {
		return fmt.Errorf("input of %s: %w", spec.ID, err)
	} else if len(problems) > 0 {
		return c.reject(ctx, spec.ID, problems, now)
	}
	total, groups, err := expand.Count(ctx, eff, c.opener)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		field := "items"
		if eff.Input != "" {
			field = "input"
		}
		return c.reject(ctx, spec.ID, []messages.FieldError{{Field: field, Message: err.Error()}}, now)
	}
	brec := budget.Effective(eff, total, c.cfg.Budget)
	if _, _, err := c.budget.Create(ctx, spec.ID, brec); err != nil {
		return fmt.Errorf("budget of %s: %w", spec.ID, err)
	}
	if _, err := provision.EnsurePool(ctx, c.js, c.names, eff.Pool, c.cfg.Provision); err != nil {
		return err
	}
	rec := messages.JobRecord{
		Spec: eff,
		Status: messages.JobStatus{
			ID: spec.ID, Name: eff.Name, Pool: eff.Pool, State: messages.StatePending,
			Items: total, Budget: brec.Status(), SubmittedAt: now,
		},
		Routes: c.routes(ctx, eff, groups),
	}
	if eff.GroupBy != "" {
		rec.Status.Groups = make(map[string]messages.GroupStatus, len(groups))
		for g, n := range groups {
			rec.Status.Groups[g] = messages.GroupStatus{Items: n}
		}
	}
	if eff.BestEffort != nil {
		rec.Status.BestEffort = bestEffortStatus(spec.BestEffort, eff.BestEffort, len(groups))
		if eff.BestEffort.Deadline > 0 {
			dl := now.Add(eff.BestEffort.Deadline.D())
			rec.Deadline = &dl
			rec.Status.BestEffort.Deadline = &dl
		}
	}
	created, err := c.store.create(ctx, &rec)
	if err != nil {
		return err
	}
	if !created {
		return nil
	}
	if spec.Input != eff.Input {
		c.dropUpload(ctx, spec.Input) // the job reads its own copy
	}
	c.metrics.jobsAccepted.Inc()
	c.log.Info().Str("job_id", spec.ID).Int64("items", total).Msg("job accepted")
	c.event(spec.ID, messages.EventSubmitted, "JobSubmitted", map[string]any{"items": total, "pool": eff.Pool})
	c.startRunner(rec)
	return nil
}

// bestEffortStatus clamps min_groups to [1, groups] and records the clamp.
func bestEffortStatus(requested, eff *messages.BestEffort, groups int) *messages.BestEffortStatus {
	groups = max(groups, 1) // an empty job still has its one (empty) group
	be := &messages.BestEffortStatus{
		MinGroups: eff.MinGroups, RequestedMinGroups: requested.MinGroups,
		Groups: groups, LateResults: eff.LateResults,
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
		if g == spec.Pool || messages.ValidPool(g) != nil {
			continue
		}
		if _, err := c.js.Consumer(ctx, c.names.WorkStream(), c.names.AgentsConsumer(g)); err == nil {
			routes[g] = g
		}
	}
	return routes
}

func (c *Coordinator) reject(ctx context.Context, id string, problems []messages.FieldError, now time.Time) error {
	rec := messages.JobRecord{Status: messages.JobStatus{
		ID: id, State: messages.StateRejected, Problems: problems, SubmittedAt: now, FinishedAt: &now,
	}}
	created, err := c.store.create(ctx, &rec)
	if err != nil {
		return err
	}
	if created {
		c.metrics.jobsRejected.Inc()
		c.log.Warn().Str("job_id", id).Int("problems", len(problems)).Msg("durable submission rejected")
		c.event(id, messages.EventRejected, "JobRejected", map[string]any{"problems": problems})
	}
	return nil
}

// rejectedID picks the id under which a rejected submission is recorded:
// its own id when that is a valid token, else "rejected-<seq>".
func rejectedID(data []byte, seq uint64) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &probe) == nil && messages.ValidToken(probe.ID) == nil {
		return probe.ID
	}
	if spec, err := jobspec.Parse(data); err == nil && spec.ID != "" {
		return spec.ID
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

// event publishes a lifecycle event; events are best effort.
func (c *Coordinator) event(job, subjType, name string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		return
	}
	body, _ := json.Marshal(messages.Event{Type: name, JobID: job, Time: c.cfg.Clock.Now(), Data: raw})
	m := nats.NewMsg(c.names.EventSubject(job, subjType))
	m.Data = body
	m.Header.Set(messages.HeaderJobID, job)
	m.Header.Set(messages.HeaderEventType, name)
	if _, err := c.js.PublishMsgAsync(m); err != nil {
		c.log.Debug().Err(err).Str("event", name).Msg("event not published")
	}
}

// fillBudget copies the job's budget record into st.
func (c *Coordinator) fillBudget(ctx context.Context, st *messages.JobStatus) {
	rec, err := c.budget.Get(ctx, st.ID)
	if err != nil {
		return
	}
	b := rec.Status()
	b.DeniedJob, b.DeniedItem = st.Budget.DeniedJob, st.Budget.DeniedItem
	st.Budget = b
	c.fillBreaker(ctx, st)
}

// Status returns a job's current status.
func (c *Coordinator) Status(ctx context.Context, id string) (*messages.JobStatus, error) {
	if r := c.runner(id); r != nil {
		st := r.snapshot().Status
		c.fillBudget(ctx, &st)
		return &st, nil
	}
	rec, err := c.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &rec.Status, nil
}

// Cancel stops a running job: queued items are removed and counted as
// not_run, in-flight ones may still finish; the state becomes cancelled.
func (c *Coordinator) Cancel(ctx context.Context, id string) (*messages.JobStatus, error) {
	r := c.runner(id)
	if r == nil {
		rec, err := c.store.get(ctx, id)
		if err != nil {
			return nil, err
		}
		return &rec.Status, errJobFinished
	}
	st, err := r.stop(ctx, messages.StateCancelled, messages.CompletionCancelled)
	if err != nil {
		return &st, err
	}
	return &st, nil
}
