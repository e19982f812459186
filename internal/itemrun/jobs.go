package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetfleet/jetfleet/internal/expr"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/specenv"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// job is what an agent needs of a job, loaded once from fleet_jobs.
type job struct {
	id       string
	spec     *messages.JobSpec
	mapSteps *stepSet
	reduce   *stepSet // nil without reduce steps
	setup    *stepSet // nil without setup steps or an input command (setup.go)
	workflow *retry.Workflow
	custom   command // on_item_failure: custom with a shell step
	env      []string
	onItem   string
	routes   map[string]string     // group → pool, set at acceptance (JobRecord.Routes)
	budget   messages.BudgetStatus // the limits the coordinator set at acceptance
	shares   map[string]int        // each pool's share of budget.Total (JobRecord.BudgetShares)
	items    int64                 // the job's item count: ${item_total}
	// envOnce makes envs: the job's environment on this agent, nil when
	// the job's env applies as it is (jobenv.go).
	envOnce sync.Once
	envs    *specenv.Env
	// setupCaptures are the variables the job's setup captured
	// (SpecRecord.SetupCaptures): every map and reduce item reads them.
	setupCaptures map[string]*wire.Capture

	// resultSubject is where this agent reports the job's results, made
	// on the first report (resultSubjectOf): not a string per item.
	resultSubject atomic.Pointer[string]
}

// pool is the pool the coordinator routed wi to: its group's route, or
// the job's pool (the reduce item always runs on the job's pool).
func (j *job) pool(wi *wire.WorkItem) string {
	if p, ok := j.routes[wi.Group]; ok && wi.Phase == "" {
		return p
	}
	if j.spec.Pool != "" {
		return j.spec.Pool
	}
	return messages.DefaultPool
}

// stepSet is a compiled list of steps: the agent_template or the reduce steps.
type stepSet struct {
	steps     []messages.Step
	policies  []*retry.Policy
	commands  []command // per step; zero for handler steps
	fallbacks []command // per step with a fallback
	// when are the steps' conditions (nil: none), compiled once.
	when []*expr.Expr
	// onSuccess are the steps' on_success commands (nil: none).
	onSuccess []*command
	// onExit are the steps' on_exit_code handlers by code (nil: none).
	onExit []map[int]command
	// timed: a step has a retry_budget, a bound on time spent that the
	// item's state carries across agents (local retries write it at once).
	timed bool
}

// command is a compiled shell command: its script, or why it cannot run
// (a spec accepted before a check was added, or stored by hand).
type command struct {
	script *shell.Script
	err    error
	// workingDir is the step's working_dir (the fallback's is its step's).
	workingDir string
	// env is the step's own env (NAME=value), over the job's; clearEnv
	// leaves the agent's --step-env variables out (jobenv.go).
	env      []string
	clearEnv bool
	// claude is a claude step's prompt (claude.go); script is nil then.
	claude *wire.Template
	// commitRequired: the step must leave a new commit (commit.go).
	commitRequired bool
	// capture: the step captures its output (capture.go), so up to
	// wire.MaxCaptureBytes of it is kept.
	capture bool
	// write is a write_file step's (writefile.go); script is nil then.
	write *writeCmd
	// foreach is a foreach step's (foreach.go); script is nil then.
	foreach *foreachCmd
	// seq is a fallback of several commands (runFallback); script is nil.
	seq *stepSet
}

func compileCommand(t wire.Template) command {
	s, err := shell.Compile(t)
	return command{script: s, err: err}
}

var errJobNotFound = errors.New("agent: job not found")

// recordGetter is what the job cache reads first: KeyValue.Get, a direct
// get that any replica of the bucket may answer.
type recordGetter interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// leaderGet reads a key from the bucket's stream leader (kvleader.Reader.Get):
// nil data for a key that is absent there.
type leaderGet func(ctx context.Context, key string) (data []byte, rev uint64, err error)

// jobCache loads and keeps job specs; specs never change once accepted.
// Safe for concurrent use.
//
// A job is read with a direct get, which a lagging replica may answer with
// "not found" (or with an older, rejected record of the same id) for a job
// that exists (docs/jetstream.md §17). Such an answer would make the agent
// dead-letter a live item without a result, and the job would never end, so
// it is never taken as final: the record is read again from the stream
// leader, which has applied every acknowledged write, and only the leader's
// "not found" is.
//
// With specs set, the spec is read from the pool's specs bucket
// (specs.go), and a job record of the jobs bucket (kv, leader, or legacy)
// only for a job that has no spec there, as a coordinator of an earlier
// version wrote it.
type jobCache struct {
	kv     recordGetter
	leader leaderGet
	specs  *specSource    // nil: job records only (kv, leader)
	legacy *legacyRecords // with specs: the job records, when readable
	mu     sync.Mutex
	m      map[string]*job
	ended  map[string]time.Time // jobs whose map phase ended (map_ended events), and when
	// loading holds the loads under way: the items of a new job arrive on
	// every slot at once, and each decoding the spec (with inline items,
	// megabytes) would hold each slot as long as all of them together.
	loading map[string]*jobLoad
}

// jobLoad is one load of a job under way; j and err are set when done is
// closed.
type jobLoad struct {
	done chan struct{}
	j    *job
	err  error
}

func newJobCache(kv recordGetter, leader leaderGet) *jobCache {
	return &jobCache{kv: kv, leader: leader, m: map[string]*job{}, ended: map[string]time.Time{}, loading: map[string]*jobLoad{}}
}

// markEnded records that a job's map phase ended: its first-generation
// items still queued or prefetched are not started.
func (c *jobCache) markEnded(id string) { c.markEndedAt(id, time.Time{}) }

// markEndedAt is markEnded for a map_ended event sent at the given time.
func (c *jobCache) markEndedAt(id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ended) > 4096 {
		clear(c.ended) // only an optimisation: the coordinator purges too
	}
	c.ended[id] = at
}

// forget drops the cached spec of a job; the next item reads it again.
func (c *jobCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// budgetLimits returns the retry budget limits of a budget key
// (budget.Key) of a job in the cache, as its record (which only the
// coordinator writes) says: the job's, or its pool's share of them when
// the job runs in several pools. It is budget.WithLimits.
func (c *jobCache) budgetLimits(key string) (total, perItemMax int, ok bool) {
	pool, id := budget.SplitKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.m[id]
	if !ok {
		return 0, 0, false
	}
	total, perItemMax = j.budget.Total, j.budget.PerItemMax
	if share, ok := j.shares[pool]; ok {
		total, perItemMax = share, min(perItemMax, share)
	}
	return total, perItemMax, true
}

func (c *jobCache) isEnded(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ended[id]
	return ok
}

// get returns the job, loading it if it is not in the cache. Callers
// asking for a job while it loads wait for that load.
func (c *jobCache) get(ctx context.Context, id string) (*job, error) {
	if messages.ValidToken(id) != nil {
		return nil, errJobNotFound // and never a key sent to the server
	}
	c.mu.Lock()
	j, ok := c.m[id]
	l, waiting := c.loading[id]
	if !ok && !waiting {
		l = &jobLoad{done: make(chan struct{})}
		c.loading[id] = l
	}
	c.mu.Unlock()
	switch {
	case ok:
		return j, nil
	case waiting:
		select {
		case <-l.done:
			return l.j, l.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	l.j, l.err = c.loadJob(ctx, id)
	c.mu.Lock()
	delete(c.loading, id)
	c.mu.Unlock()
	close(l.done)
	return l.j, l.err
}

// loadJob loads and compiles the job and puts it in the cache.
func (c *jobCache) loadJob(ctx context.Context, id string) (*job, error) {
	ld, err := c.load(ctx, id)
	if err != nil {
		return nil, err
	}
	j, err := compileJob(id, ld.spec)
	if err != nil {
		return nil, err
	}
	j.routes = ld.routes
	j.budget = ld.budget
	j.shares = ld.shares
	j.items = ld.items
	j.setupCaptures = ld.setupCaptures
	c.mu.Lock()
	if len(c.m) > 4096 { // jobs are few; bound the cache anyway
		clear(c.m)
	}
	c.m[id] = j
	if at, ok := c.ended[id]; ok && ld.started(at) {
		// The job's map phase runs: a map_ended seen for this id was of an
		// earlier job of the same id, deleted by retention since.
		delete(c.ended, id)
	}
	c.mu.Unlock()
	return j, nil
}

// load reads what the agent needs of a job: its spec record, or the job
// record of the previous layout.
func (c *jobCache) load(ctx context.Context, id string) (*loaded, error) {
	if c.specs == nil {
		rec, err := c.read(ctx, c.kv, c.leader, id)
		if err != nil {
			return nil, err
		}
		return loadedRecord(rec), nil
	}
	spec, ok, err := c.specs.read(ctx, id)
	switch {
	case ok:
		return loadedSpec(spec), nil
	case err != nil && !errors.Is(err, errNoSpecs):
		return nil, err
	case c.legacy == nil:
		return nil, errJobNotFound
	}
	kv, leader, ok, err := c.legacy.open(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errJobNotFound
	}
	rec, err := c.read(ctx, kv, leader, id)
	if err != nil {
		return nil, err
	}
	return loadedRecord(rec), nil
}

// read reads the job's record: a direct get, and when that finds no
// usable spec, the stream leader's answer, which alone is final.
func (c *jobCache) read(ctx context.Context, kv recordGetter, leader leaderGet, id string) (*wire.JobRecord, error) {
	e, err := kv.Get(ctx, id)
	switch {
	case err == nil:
		rec, err := decodeRecord(id, e.Value())
		if err != nil || rec.Spec != nil {
			return rec, err
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, err
	}
	if leader == nil {
		return nil, errJobNotFound
	}
	data, _, err := leader(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("agent: job record %s from the stream leader: %w", id, err)
	}
	if data == nil {
		return nil, errJobNotFound
	}
	rec, err := decodeRecord(id, data)
	if err != nil {
		return nil, err
	}
	if rec.Spec == nil {
		return nil, errJobNotFound // a rejected submission has no spec
	}
	return rec, nil
}

func decodeRecord(id string, data []byte) (*wire.JobRecord, error) {
	var rec wire.JobRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("agent: job record %s: %w", id, err)
	}
	return &rec, nil
}

func compileJob(id string, spec *messages.JobSpec) (*job, error) {
	w, err := retry.NewWorkflow(spec.ErrorPolicy)
	if err != nil {
		return nil, fmt.Errorf("agent: job %s: error_policy: %w", id, err)
	}
	j := &job{id: id, spec: spec, workflow: w, onItem: w.Action()}
	if c := w.Custom(); c != nil && c.Shell != "" {
		t, err := wire.ParseTemplate(c.Shell)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: error_policy.on_item_failure.custom.shell: %w", id, err)
		}
		j.custom = compileCommand(t)
	}
	for k, v := range spec.Env {
		j.env = append(j.env, k+"="+v)
	}
	if j.mapSteps, err = compileSteps(id, "agent_template", spec.AgentTemplate); err != nil {
		return nil, err
	}
	if len(spec.Reduce) > 0 {
		if j.reduce, err = compileSteps(id, "reduce", spec.Reduce); err != nil {
			return nil, err
		}
	}
	if j.setup, err = compileSetup(id, spec); err != nil {
		return nil, err
	}
	return j, nil
}

func compileSteps(id, field string, steps []messages.Step) (*stepSet, error) {
	s := &stepSet{steps: steps}
	for i, st := range steps {
		p, err := retry.NewPolicy(st.RetryConfig)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: %s[%d].retry_config: %w", id, field, i, err)
		}
		s.policies = append(s.policies, p)
		if _, ok := p.Budget(); ok {
			s.timed = true
		}
		var t, fb wire.Template
		if st.Shell != "" {
			if t, err = wire.ParseTemplate(st.Shell); err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d].shell: %w", id, field, i, err)
			}
		}
		if fa := p.OnFailure(); fa.NeedsFallback() {
			if fb, err = wire.ParseTemplate(fa.Fallback); err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d] fallback: %w", id, field, i, err)
			}
		}
		var cmd, fbCmd command
		if st.Shell != "" {
			cmd = compileCommand(t)
			cmd.workingDir = st.WorkingDir
		}
		if st.Claude != "" {
			pt, err := wire.ParseTemplate(st.Claude)
			if err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d].claude: %w", id, field, i, err)
			}
			cmd = command{claude: &pt, workingDir: st.WorkingDir}
		}
		if st.WriteFile != nil {
			w, err := compileWrite(st.WriteFile)
			if err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d].%w", id, field, i, err)
			}
			cmd = command{write: w}
		}
		switch {
		case fb.Raw != "" && st.RetryConfig != nil && st.RetryConfig.OnFailure != nil && st.RetryConfig.OnFailure.Claude:
			fbCmd = command{claude: &fb, workingDir: st.WorkingDir} // Prodigy's on_failure: {claude}
		case fb.Raw != "":
			fbCmd = compileCommand(fb)
			fbCmd.workingDir = st.WorkingDir
		}
		if fb.Raw != "" {
			fbCmd.commitRequired = st.RetryConfig.OnFailure.CommitRequired
		}
		if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil && len(rc.OnFailure.Steps) > 0 {
			seq, err := compileSteps(id, fmt.Sprintf("%s[%d].retry_config.on_failure.fallback.steps", field, i), rc.OnFailure.Steps)
			if err != nil {
				return nil, err
			}
			fbCmd = command{seq: seq, workingDir: st.WorkingDir, commitRequired: rc.OnFailure.CommitRequired}
		}
		cmd.env, cmd.clearEnv = stepEnviron(st.Env), st.ClearEnv
		fbCmd.env, fbCmd.clearEnv = cmd.env, cmd.clearEnv
		cmd.commitRequired = st.CommitRequired
		cmd.capture = st.Capture != ""
		var cond *expr.Expr
		if st.When != "" {
			if cond, err = expr.ParseCondition(st.When); err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d].when: %w", id, field, i, err)
			}
		}
		s.when = append(s.when, cond)
		var ok *command
		if st.OnSuccess != "" {
			ot, err := wire.ParseTemplate(st.OnSuccess)
			if err != nil {
				return nil, fmt.Errorf("agent: job %s: %s[%d].on_success: %w", id, field, i, err)
			}
			c := compileCommand(ot)
			c.workingDir = st.WorkingDir
			c.env, c.clearEnv = cmd.env, cmd.clearEnv
			ok = &c
		}
		s.onSuccess = append(s.onSuccess, ok)
		if st.Foreach != nil {
			if cmd.foreach, err = compileForeach(id, fmt.Sprintf("%s[%d].foreach", field, i), st.Foreach); err != nil {
				return nil, err
			}
		}
		onExit, err := compileExitHandlers(id, fmt.Sprintf("%s[%d].on_exit_code", field, i), &st)
		if err != nil {
			return nil, err
		}
		s.onExit = append(s.onExit, onExit)
		s.commands = append(s.commands, cmd)
		s.fallbacks = append(s.fallbacks, fbCmd)
	}
	return s, nil
}

func (s *stepSet) stepName(i int) string {
	if n := s.steps[i].Name; n != "" {
		return n
	}
	return fmt.Sprintf("step-%d", i+1)
}
