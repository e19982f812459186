package simulate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/failure"
	"github.com/jetfleet/jetfleet/internal/itemrun"
	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Completion reasons of a truncated run.
const (
	ReasonHorizon   = "horizon"    // stopped by Config.Horizon
	ReasonMaxEvents = "max_events" // stopped by Config.MaxEvents
)

// ctxCheckEvery is how many events run between two checks of the context.
const ctxCheckEvery = 1 << 16

// Run simulates cfg's job in virtual time and returns what it did. It
// neither sleeps nor talks to a server: a million items take well under a
// second (BenchmarkMillionItems). An invalid cfg gives a *messages.ValidationError listing every
// problem with its field path; ctx ending stops the run with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s.result(), nil
}

// stepModel is one compiled step of the job, as the agent compiles it.
type stepModel struct {
	policy    *retry.Policy
	onFailure retry.FailureAction
	timeout   int64
	// breaker is the step's own circuit breaker (retry_config.circuit_breaker;
	// nil: none, and for steps but the dependency's: they never fail).
	breaker *retry.Breaker
	// Assessments of the dependency's failures (dependency step only):
	// the policy assesses each kind of failure once.
	failed, timedOut retry.Assessment
	// What each kind of failure tells an adaptive limit.
	limFailed, limTimedOut limit.Outcome
}

// itemState is one item's state: what the agent persists in fleet_items
// (step, retry state, retries, whole-item run) plus what the simulator
// tracks. Times are virtual times + 1, 0 meaning none.
type itemState struct {
	started      int64 // when the item's run began (ItemState.StartedAt): agent_timeout counts from it
	stepEpoch    int64 // the step breaker's ticket (flagStepTicket): the half-open period it probes + 1; 0 = not a probe
	firstFailure int64
	spent        int64 // retry.State.DelaySpent
	lastDelay    int64
	itemDelay    int64 // the delay before the current whole-item run
	epoch        int64 // breaker ticket: the half-open period it probes + 1; 0 = not a probe
	attempts     int32 // failed runs of the current step
	retries      int32 // retries granted, all steps and whole-item runs together
	deliveries   int32 // the message's NumDelivered
	delivered    int64 // when the current delivery reached its agent + 1 (a local retry keeps it)
	local        uint8 // local retries in a row since that delivery
	run          int32 // whole-item run (error_policy retry), 1-based once set
	step         int16
	limitSince   int64 // when the run began waiting in its agent for the step's limit + 1; 0 = not waiting
	phases       uint8 // phases in which the item called the dependency (bit per phase)
	flags        uint8
	// limitWake numbers the item's waits for a slot of the step's limit:
	// a poll (evLimit) or a handover (limitWaiter) of an older wait is stale.
	limitWake uint8
}

// itemState flags.
const (
	flagFailedOnce uint8 = 1 << iota // a step run failed
	flagFinal                        // the item has an outcome (or is not run)
	flagSettled                      // this delivery's breaker outcome is recorded
	flagStepTicket                   // the current run was admitted by its step's own breaker, to settle
	flagSlot                         // the current run holds a slot of the step's limit
	flagLocal                        // the item waits in its agent as a local retry, or is in its buffer after one
)

// agentState is one agent as pkg/agent consumes (pkg/agent/pull.go):
// Concurrency workers take messages from a buffer that one pull loop
// fills. When the agent has no pull request outstanding and its buffer is
// at most half full, the loop asks for what the buffer lacks (Prefetch
// less what it holds) in one request, and asks again once that request has
// had all its messages.
type agentState struct {
	free        int         // idle workers
	buf         ring[int32] // messages received, not yet taken by a worker
	outstanding int         // messages the agent's pull request still waits for; 0: none
}

// pullRequest is a pull request waiting on the server: n more messages for
// an agent.
type pullRequest struct {
	agent int32
	n     int32
}

type sim struct {
	cfg   Config
	dep   Dependency
	items []itemState
	steps []stepModel
	n     int64

	wf      *retry.Workflow
	onItem  string
	breaker *retry.Breaker
	bst     retry.BreakerState
	sbst    retry.BreakerState // the dependency step's own breaker
	// agentTimeout is the job's agent_timeout (0: none).
	agentTimeout int64
	rec          budget.Record
	denials      []budget.Grant // claimRecord's memo of denials by itemRetries, for rec as it is
	maxPar       int64
	base         time.Time
	rnd          *rand.Rand // jitter, park spread, whole-item backoff
	errRnd       *rand.Rand // which calls fail under a partial error rate

	events   eventHeap
	agents   []agentState
	requests ring[pullRequest] // the pull requests waiting on the server, served round-robin
	pumps    ring[int32]       // agents whose pump may move: a worker freed or a message arrived
	rdq      ring[int32]       // redeliveries due, in order (served before new messages)

	nextFresh int64 // the next item never delivered
	pending   int64 // delivered and not yet acked or terminated (MaxAckPending)
	done      int64 // items with an outcome
	ended     bool  // the map phase ended
	now       int64

	// lim is the dependency step's limit (nil: none), decided with the
	// fleet's own pure code (limit.Record); agentIDs name the agents in it.
	lim      *limit.Record
	agentIDs []string
	// limitWaiters are, per agent, the runs waiting in it for a slot of
	// the limit, oldest first (stale entries are skipped).
	limitWaiters []ring[limitWaiter]
	// limitPollAt is, per agent, when its runs waiting for the limit may
	// ask again after a refused take: the agent's Limiter keeps one such
	// time per limit for all its callers (one take per agent per
	// SlotPoll while the limit is full), and a handover clears it.
	limitPollAt []int64

	res       Result
	phaseEnds [2]int64 // outage start and end (after the ramp: "after")
	openSince int64
}

func newSim(cfg Config) (*sim, error) {
	spec := jobspec.WithDefaults(cfg.Spec) // what the coordinator records and agents compile
	cfg.BestEffort.Apply(cfg.Spec.BestEffort, spec.BestEffort)
	s := &sim{
		cfg:    cfg,
		dep:    cfg.Dependency,
		n:      cfg.Items,
		items:  make([]itemState, cfg.Items),
		base:   time.Unix(1<<30, 0).UTC(),
		rnd:    rand.New(rand.NewPCG(cfg.Seed, 0x6a65746669656c64)),
		errRnd: rand.New(rand.NewPCG(cfg.Seed, 0x6f75746167650a00)),
		maxPar: int64(spec.MaxParallel),
	}
	var ps problems
	wf, err := retry.NewWorkflow(spec.ErrorPolicy)
	ps.addConfig("error_policy", err)
	for i, st := range spec.AgentTemplate {
		p, err := retry.NewPolicy(st.RetryConfig)
		if err != nil {
			ps.addConfig(messages.IndexPath("agent_template", i)+".retry_config", err)
			continue
		}
		sm := stepModel{policy: p, onFailure: p.OnFailure(), timeout: int64(st.Timeout.D())}
		if i == s.dep.Step {
			var f, t retry.Failure
			sm.failed, sm.timedOut, f, t = s.assess(p, &st, sm.timeout)
			sm.limFailed, sm.limTimedOut = limit.OutcomeOf(&f), limit.OutcomeOf(&t)
			sm.breaker = p.Breaker()
			if l := st.Limit; l != nil {
				lc := cfg.Limit
				if l.Key != "" {
					lc = l.LimitConfig
				}
				rec := limit.Record{}.Configure(s.base, lc.WithDefaults())
				s.lim = &rec
			}
		} else if spec.AgentTimeout > 0 {
			_, sm.timedOut, _, _ = s.assess(p, &st, sm.timeout) // agent_timeout may cut any step
		}
		s.steps = append(s.steps, sm)
	}
	if len(ps) > 0 {
		return nil, &messages.ValidationError{Problems: ps}
	}
	s.wf, s.onItem, s.breaker = wf, wf.Action(), wf.Breaker()
	s.agentTimeout = int64(spec.AgentTimeout.D())
	s.rec = budget.Effective(spec, cfg.Items, cfg.Budget)

	f := cfg.Fleet
	s.agents = make([]agentState, f.Agents)
	if s.lim != nil {
		for a := range f.Agents {
			s.agentIDs = append(s.agentIDs, "agent-"+strconv.Itoa(a))
		}
		s.limitWaiters = make([]ring[limitWaiter], f.Agents)
		s.limitPollAt = make([]int64, f.Agents)
	}
	// Every agent starts with a request for Prefetch messages.
	for a := range s.agents {
		s.agents[a] = agentState{free: f.Concurrency, outstanding: f.Prefetch}
		s.requests.push(pullRequest{agent: int32(a), n: int32(f.Prefetch)})
	}
	if d := s.dep; d.Outage > 0 {
		s.phaseEnds = [2]int64{int64(d.OutageAt), int64(d.OutageAt + d.Outage)}
	}
	if be := spec.BestEffort; be != nil && be.Deadline > 0 {
		s.events.push(event{at: int64(be.Deadline.D()), kind: evDeadline})
	}
	s.res = Result{
		Items:   cfg.Items,
		Reasons: map[string]int64{},
		Budget:  Budget{Total: s.rec.Total, PerItemMax: s.rec.PerItemMax, Denied: map[string]int64{}},
		Series:  Series{Bucket: cfg.Bucket},
	}
	if s.rec.Exhausted {
		s.res.Budget.Exhausted = true
	}
	if s.breaker != nil {
		s.res.Breaker = &Breaker{}
	}
	return s, nil
}

// assess builds the dependency's failures as the agent sees them (a
// handler's error, or a shell command's exit status and stderr; a step
// timeout) and assesses them with the step's policy.
func (s *sim) assess(p *retry.Policy, st *messages.Step, timeout int64) (failed, timedOut retry.Assessment, f, t retry.Failure) {
	d := s.dep
	if st.Shell != "" {
		code := d.ExitCode
		f = retry.Failure{Message: fmt.Sprintf("exit status %d: %s", code, d.Error), Stderr: d.Error + "\n", ExitCode: &code}
		t = retry.Failure{Message: "timeout after " + time.Duration(timeout).String(), TimedOut: true}
	} else {
		err := errors.New(d.Error)
		if d.RetryAfter > 0 {
			err = retry.After(d.RetryAfter, err)
		}
		f = retry.Failure{Err: err}
		t = retry.Failure{Err: context.DeadlineExceeded, TimedOut: true}
	}
	return p.Assess(f), p.Assess(t), f, t
}

func (ps *problems) addConfig(prefix string, err error) {
	if err == nil {
		return
	}
	var ce *retry.ConfigError
	if !errors.As(err, &ce) {
		ps.add(prefix, "%v", err)
		return
	}
	for _, p := range ce.Problems {
		field := prefix
		if p.Field != "" {
			field += "." + p.Field
		}
		ps.add(field, "%s", p.Message)
	}
}

// run is the event loop.
func (s *sim) run(ctx context.Context) error {
	horizon := int64(s.cfg.Horizon)
	reason := ReasonHorizon
	s.dispatch()
	for n := int64(0); s.events.len() > 0; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if n >= s.cfg.MaxEvents {
			s.res.Truncated, reason = true, ReasonMaxEvents
			break
		}
		e := s.events.pop()
		if e.at > horizon {
			s.res.Truncated = true
			s.now = horizon
			break
		}
		s.now = e.at
		switch e.kind {
		case evReady:
			s.rdq.push(e.item)
		case evLocal:
			s.agents[e.agent].buf.push(e.item)
			s.pumps.push(e.agent)
		case evDone:
			s.stepDone(&e)
		case evLimit, evLimitKick:
			if e.run != s.items[e.item].limitWake {
				break // a poll of a wait that a handover ended
			}
			if e.kind == evLimitKick {
				s.limitPollAt[e.agent] = 0
			} else if at := s.limitPollAt[e.agent]; s.now < at {
				// Another of the agent's runs asked and was refused
				// meanwhile: this one waits as long.
				s.events.push(event{at: at, kind: evLimit, item: e.item, agent: e.agent, run: e.run})
				break
			}
			if s.takeLimit(e.agent, e.item) {
				s.startRun(e.agent, e.item)
			}
		case evDeadline:
			if !s.ended {
				s.endMap(s.tally().State(), messages.CompletionDeadline)
			}
		}
		s.dispatch()
	}
	if !s.ended {
		// Truncated: end where it is.
		s.endMap(s.tally().State(), reason)
	}
	return nil
}

// dispatch moves messages from the server to the agents and from the
// agents' pumps to their workers, until nothing can move. The server serves
// its waiting pull requests round-robin, one message at a time (a request
// with more to take goes to the back of the queue, as nats-server's
// waitQueue.pop), redeliveries before new messages.
func (s *sim) dispatch() {
	for {
		for s.pumps.n > 0 {
			s.pump(s.pumps.pop())
		}
		if s.requests.n == 0 {
			return
		}
		it, ok := s.nextMessage()
		if !ok {
			return
		}
		r := s.requests.pop()
		if r.n--; r.n > 0 {
			s.requests.push(r)
		}
		ag := &s.agents[r.agent]
		ag.buf.push(it)
		ag.outstanding--
		s.pumps.push(r.agent)
	}
}

// pump runs agent a as far as it can: its idle workers take buffered
// messages, and its pull loop asks for more when it has no request
// outstanding and its buffer is at most half full.
func (s *sim) pump(a int32) {
	ag := &s.agents[a]
	want := s.cfg.Fleet.Prefetch
	for {
		if ag.free > 0 && ag.buf.n > 0 {
			ag.free--
			s.deliver(a, ag.buf.pop())
			continue
		}
		if ag.outstanding == 0 {
			if n := want - ag.buf.n; n >= max(1, (want+1)/2) {
				s.requests.push(pullRequest{agent: a, n: int32(n)})
				ag.outstanding = n
			}
		}
		return
	}
}

// nextMessage is the message the server delivers next, if any: a due
// redelivery, else the next new message while MaxAckPending and the job's
// max_parallel allow one. After the map phase ended the queued messages
// are purged.
func (s *sim) nextMessage() (int32, bool) {
	if s.rdq.n > 0 {
		return s.rdq.pop(), true
	}
	if s.ended || s.nextFresh >= s.n {
		return 0, false
	}
	if m := s.cfg.Fleet.MaxAckPending; m > 0 && s.pending >= int64(m) {
		return 0, false
	}
	if s.maxPar > 0 && s.nextFresh >= s.done+s.maxPar {
		return 0, false
	}
	it := s.nextFresh
	s.nextFresh++
	s.pending++
	return int32(it), true
}

// slotFree frees one of agent a's workers.
func (s *sim) slotFree(a int32) {
	s.agents[a].free++
	s.pumps.push(a)
}

// deliver is the agent's process: an item's delivery, on agent a.
func (s *sim) deliver(a int32, it int32) {
	st := &s.items[it]
	if st.flags&flagLocal != 0 {
		st.flags &^= flagLocal // a local retry: the same delivery
	} else {
		st.deliveries++
		s.res.Deliveries++
		st.delivered, st.local = s.now+1, 0
	}
	if s.ended || st.flags&flagFinal != 0 {
		// The job ended: the agent terminates the message (not_run).
		s.release(st)
		s.slotFree(a)
		return
	}
	st.epoch = 0
	st.flags &^= flagSettled
	if s.breaker != nil {
		now := s.tm(s.now)
		next, ok, retryAt := s.breaker.Admit(now, s.bst)
		s.setBreaker(next)
		switch {
		case ok:
			if t := retry.TicketOf(next); t.Probe {
				st.epoch = s.virt(t.Epoch)
			}
		case !s.lastDelivery(st):
			// Parked: no attempt, no budget, no item state.
			s.res.Parked++
			s.nak(it, failure.ParkDelay(retryAt.Sub(now), s.rnd.Float64()))
			s.slotFree(a)
			return
		}
		// On the last delivery a refused item runs anyway, outside the
		// breaker's count (its ticket is no probe).
	}
	s.runStep(a, it)
}

// lastDelivery reports whether this is the consumer's last delivery of the
// item's message (MaxDeliver).
func (s *sim) lastDelivery(st *itemState) bool {
	m := s.cfg.Fleet.MaxDeliver
	return m > 0 && int(st.deliveries) >= m
}

// runStep starts a run of the item's current step (the agent's runSteps):
// none when the item's agent_timeout is up or the step's own breaker
// refuses it, and none that outlasts agent_timeout.
func (s *sim) runStep(a int32, it int32) {
	st := &s.items[it]
	i := int(st.step)
	sm := &s.steps[i]
	if s.agentTimeout > 0 && st.started == 0 {
		st.started = s.now + 1
	}
	dl := s.deadline(st)
	if dl.Passed(s.tm(s.now)) {
		s.refused(a, it, false)
		return
	}
	st.flags &^= flagStepTicket
	if sm.breaker != nil {
		next, ok, _ := sm.breaker.Admit(s.tm(s.now), s.sbst)
		s.sbst = next
		if !ok {
			s.res.FailedFast++
			s.refused(a, it, true)
			return
		}
		st.flags |= flagStepTicket
		st.stepEpoch = 0
		if t := retry.TicketOf(next); t.Probe {
			st.stepEpoch = s.virt(t.Epoch)
		}
	}
	if i == s.dep.Step && s.lim != nil && !s.takeLimit(a, it) {
		return
	}
	s.startRun(a, it)
}

// limitLease is the lease of a simulated limit's slots: agents do not die.
const limitLease = time.Hour

// takeLimit takes a token and a slot of the dependency step's limit for
// the item's run on agent a, as the agent's limit.Limiter does; false when
// none came: the run asks again later while it may wait in the agent
// (Fleet.LimitWait), then waits outside it (a delayed nak, spending
// nothing). A run refused a slot also waits for one of the agent's own
// runs to end and hand its slot over (releaseLimit), as the agent's
// Limiter.Release does. Not modelled: an agent's batches of tokens.
func (s *sim) takeLimit(a, it int32) bool {
	st := &s.items[it]
	next, g := s.lim.Take(s.tm(s.now), limit.Request{Agent: s.agentIDs[a], Tokens: 1, Slot: true, Lease: limitLease})
	*s.lim = next
	if g.Granted() {
		st.limitSince = 0
		if g.Slot {
			st.flags |= flagSlot
		}
		return true
	}
	wait := g.Wait
	if g.Full {
		wait = limit.SlotPoll
	}
	s.limitPollAt[a] = s.now + int64(wait)
	if st.limitSince == 0 {
		st.limitSince = s.now + 1
	}
	maxWait := int64(s.cfg.Fleet.LimitWait)
	if s.now-(st.limitSince-1)+int64(wait) <= maxWait {
		if g.Full {
			st.limitWake++
			s.limitWaiters[a].push(limitWaiter{item: it, wake: st.limitWake})
		}
		s.events.push(event{at: s.now + int64(wait), kind: evLimit, item: it, agent: a, run: st.limitWake})
		return false
	}
	// The agent's limitWait: spread by up to half again, at least LimitWait.
	st.limitSince = 0
	d := max(wait+time.Duration(float64(wait)*0.5*s.rnd.Float64()), s.cfg.Fleet.LimitWait)
	s.res.LimitWaits++
	s.nak(it, d)
	s.slotFree(a)
	return false
}

// releaseLimit ends the run's hold on the dependency step's limit with
// the run's outcome.
func (s *sim) releaseLimit(a int32, st *itemState, o limit.Outcome) {
	slots := 0
	if st.flags&flagSlot != 0 {
		slots = 1
		st.flags &^= flagSlot
	}
	*s.lim = s.lim.Release(s.tm(s.now), s.agentIDs[a], slots, o, limitLease)
	if slots == 0 {
		return
	}
	// The slot goes to the agent's oldest run waiting for one, which asks
	// at once rather than at its next poll (a take that another agent
	// waiting with fewer slots refuses, as the agent's handover yields).
	for q := &s.limitWaiters[a]; q.n > 0; {
		w := q.pop()
		if ws := &s.items[w.item]; ws.limitSince != 0 && ws.limitWake == w.wake {
			ws.limitWake++
			s.events.push(event{at: s.now, kind: evLimitKick, item: w.item, agent: a, run: ws.limitWake})
			return
		}
	}
}

// limitWaiter is a run waiting in its agent for a slot: the item and the
// number of its wait.
type limitWaiter struct {
	item int32
	wake uint8
}

// startRun runs the item's current step, admitted: its call, bounded by
// agent_timeout.
func (s *sim) startRun(a, it int32) {
	st := &s.items[it]
	i := int(st.step)
	sm := &s.steps[i]
	dl := s.deadline(st)
	d := int64(s.dep.StepDuration)
	outcome := runOK
	if i == s.dep.Step {
		outcome, d = s.call(sm)
	}
	if !dl.IsZero() {
		if left := max(int64(dl.At().Sub(s.tm(s.now))), int64(time.Millisecond)); d > left {
			outcome, d = runTimedOut, left // the agent bounds the run by what is left
		}
	}
	if i == s.dep.Step {
		s.record(st, outcome != runOK)
	}
	s.events.push(event{at: s.now + d, kind: evDone, item: it, agent: a, run: outcome})
}

// deadline is the item's agent_timeout deadline (none without one).
func (s *sim) deadline(st *itemState) retry.Deadline {
	if s.agentTimeout <= 0 {
		return retry.Deadline{}
	}
	return retry.NewDeadline(s.at(st.started), time.Duration(s.agentTimeout))
}

// call is one call to the dependency now: whether it fails and how long it
// takes.
func (s *sim) call(sm *stepModel) (uint8, int64) {
	rate, slow := s.conditions()
	failed := rate >= 1 || rate > 0 && s.errRnd.Float64() < rate
	d := int64(s.dep.StepDuration)
	if failed {
		d = int64(s.dep.FailDuration)
	}
	if slow > 0 {
		d = slow
	}
	switch {
	case sm.timeout > 0 && d > sm.timeout:
		return runTimedOut, sm.timeout
	case failed:
		return runFailed, d
	}
	return runOK, d
}

// conditions are the dependency's error rate and slowness now.
func (s *sim) conditions() (rate float64, slow int64) {
	d := s.dep
	start, end := int64(d.OutageAt), int64(d.OutageAt+d.Outage)
	if d.Outage <= 0 || s.now < start {
		return 0, 0
	}
	frac := 1.0
	if s.now >= end {
		ramp := int64(d.Ramp)
		if s.now >= end+ramp {
			return 0, 0
		}
		frac = 1 - float64(s.now-end)/float64(ramp)
	}
	if d.Slow > 0 {
		normal := float64(d.StepDuration)
		slow = int64(normal + (float64(d.Slow)-normal)*frac)
	}
	return d.ErrorRate * frac, slow
}

// record counts a call to the dependency made now.
func (s *sim) record(st *itemState, failed bool) {
	s.res.Attempts++
	b := s.bucket()
	s.res.Series.Attempts[b]++
	if failed {
		s.res.Failures++
		s.res.Series.Failures[b]++
	}
	ph := s.phase()
	p := &s.phases()[ph]
	p.Attempts++
	if failed {
		p.Failures++
	}
	if st.phases&(1<<ph) == 0 {
		st.phases |= 1 << ph
		p.Items++
	}
}

// bucket is the index of now in the series, growing it (and widening its
// buckets past MaxBuckets).
func (s *sim) bucket() int {
	ser := &s.res.Series
	b := int(s.now / int64(ser.Bucket))
	for b >= MaxBuckets {
		half := (len(ser.Attempts) + 1) / 2
		for i := 0; i < half; i++ {
			a, f := ser.Attempts[2*i], ser.Failures[2*i]
			if 2*i+1 < len(ser.Attempts) {
				a += ser.Attempts[2*i+1]
				f += ser.Failures[2*i+1]
			}
			ser.Attempts[i], ser.Failures[i] = a, f
		}
		ser.Attempts, ser.Failures = ser.Attempts[:half], ser.Failures[:half]
		ser.Bucket *= 2
		b = int(s.now / int64(ser.Bucket))
	}
	for len(ser.Attempts) <= b {
		ser.Attempts = append(ser.Attempts, 0)
		ser.Failures = append(ser.Failures, 0)
	}
	return b
}

func (s *sim) phase() int {
	switch {
	case s.dep.Outage <= 0 || s.now < s.phaseEnds[0]:
		return 0
	case s.now < s.phaseEnds[1]:
		return 1
	}
	return 2
}

func (s *sim) phases() []Phase {
	if s.res.Phases == nil {
		s.res.Phases = []Phase{{Name: PhaseBefore}, {Name: PhaseDuring}, {Name: PhaseAfter}}
	}
	return s.res.Phases
}

// stepDone is the end of a step run: the agent's failure path from the
// outcome on (pkg/agent failure.go), with the same pure decisions:
// retry.Policy, then failure.StepFailure's verdict (with budget.Record.Claim
// for the grant and retry.Breaker for the breaker outcome), the step's
// retry.FailureAction, and failure.ItemFailure's verdict.
func (s *sim) stepDone(e *event) {
	it, a := e.item, e.agent
	st := &s.items[it]
	if s.lim != nil && int(st.step) == s.dep.Step && e.run != runFallback {
		o := limit.Success
		switch e.run {
		case runFailed:
			o = s.steps[st.step].limFailed
		case runTimedOut:
			o = s.steps[st.step].limTimedOut
		}
		s.releaseLimit(a, st, o)
	}
	if e.run == runOK || e.run == runFallback {
		if e.run == runOK {
			s.settleStep(st, retry.OutcomeSuccess)
		}
		s.stepSucceeded(a, it)
		return
	}
	st.flags |= flagFailedOnce
	sm := &s.steps[st.step]
	as := &sm.failed
	if e.run == runTimedOut {
		as = &sm.timedOut
	}
	now := s.tm(s.now)
	f := failure.StepFailure{
		Decision:     sm.policy.DecideAssessed(now, s.state(st), *as, s.rnd),
		Err:          as.Err(),
		LastDelivery: s.lastDelivery(st),
		Now:          now,
		Deadline:     s.deadline(st),
	}
	// The delivery's first failed step run decides its breaker outcome;
	// every run decides the step's own breaker's.
	s.settle(st, f.Breaker())
	s.settleStep(st, f.Breaker())
	if f.NeedsClaim() {
		f.Grant = s.claim(st)
	}
	s.stepEnds(a, it, &f, as.Err())
}

// refused is the failure path of a run that cannot begin (the agent's
// stepRefused): the item's agent_timeout is up, or the step's own breaker
// refused it (circuitOpen).
func (s *sim) refused(a, it int32, circuitOpen bool) {
	st := &s.items[it]
	cause := retry.ErrAgentTimeout
	if circuitOpen {
		cause = retry.ErrCircuitOpen
	}
	f := failure.StepFailure{
		Decision: retry.Decision{State: s.state(st)}, Err: cause, NotRun: true, CircuitOpen: circuitOpen,
		Now: s.tm(s.now), Deadline: s.deadline(st),
	}
	s.settle(st, f.Breaker()) // ignored, as the agent's
	s.stepEnds(a, it, &f, cause)
}

// stepEnds acts on the step's verdict (the agent's stepEnds): one switch
// on the agent's End; err is the failure on_item_failure reads.
func (s *sim) stepEnds(a, it int32, f *failure.StepFailure, err error) {
	st := &s.items[it]
	sm := &s.steps[st.step]
	v := f.Verdict()
	s.apply(st, v.State)
	if v.Kind == failure.EndGiveUp && sm.onFailure.NeedsFallback() {
		// The fallback command runs once, in the step's time, and is taken
		// to succeed (it does not call the dependency).
		s.events.push(event{at: s.now + int64(s.dep.StepDuration), kind: evDone, item: it, agent: a, run: runFallback})
		return
	}
	switch v = v.OnFailure(sm.onFailure, "", nil); v.Kind {
	case failure.EndSnooze:
		s.res.Snoozes++
		s.retryLater(a, it, v.Delay)
		s.slotFree(a)
	case failure.EndRetry:
		s.retryLater(a, it, v.Delay)
		s.slotFree(a)
	case failure.EndContinue:
		s.stepSucceeded(a, it)
	case failure.EndTimedOut, failure.EndGiveUp:
		// The item fails (on_failure does not apply to a timed-out item).
		// on_item_failure reads the failure, not the step's give-up error,
		// which would cost an allocation: it reads only its Permanent
		// marker, which both carry.
		s.itemFailed(a, it, v.Reason, err)
	}
}

// stepSucceeded moves the item to its next step, or finishes it.
func (s *sim) stepSucceeded(a, it int32) {
	st := &s.items[it]
	st.step++
	s.apply(st, retry.State{})
	if int(st.step) < len(s.steps) {
		s.runStep(a, it)
		return
	}
	s.settle(st, retry.OutcomeSuccess)
	s.finish(st, messages.OutcomeSucceeded, "")
	s.slotFree(a)
}

// claim claims one unit of the job budget for the item.
func (s *sim) claim(st *itemState) budget.Grant {
	rec, g := s.claimRecord(int(st.retries))
	if !g.Granted {
		s.res.Budget.Denied[g.Deny.Reason]++
		return g
	}
	s.rec = rec
	st.retries++
	s.res.Retries++
	if rec.Exhausted && !s.res.Budget.Exhausted {
		s.res.Budget.Exhausted, s.res.Budget.ExhaustedAt = true, time.Duration(s.now)
	}
	return g
}

// claimRecord is s.rec.Claim(itemRetries), memoized while the record does
// not change: a denial builds a *budget.Deny, and once the budget is spent
// every later claim is a denial — without the memo, one allocation per
// dead letter. Claim is a pure function of the record and itemRetries, so
// the memo returns exactly what it would.
func (s *sim) claimRecord(itemRetries int) (budget.Record, budget.Grant) {
	if itemRetries < len(s.denials) {
		if g := s.denials[itemRetries]; g.Deny != nil {
			return s.rec, g
		}
	}
	rec, g := s.rec.Claim(itemRetries)
	switch {
	case g.Granted:
		clear(s.denials) // the record changes
	case itemRetries < maxMemo:
		if itemRetries >= len(s.denials) {
			s.denials = append(s.denials, make([]budget.Grant, itemRetries+1-len(s.denials))...)
		}
		s.denials[itemRetries] = g
	}
	return rec, g
}

// maxMemo bounds the claims claimRecord memoizes (by the item's retries).
const maxMemo = 1024

// itemFailed applies error_policy.on_item_failure to an item whose step
// gave up (the agent's itemFailed): failure.ItemFailure's verdict, with the
// workflow's retry policy and a budget claim under retry, and a custom
// step taken to succeed (the item is recorded failed).
func (s *sim) itemFailed(a, it int32, reason string, err error) {
	st := &s.items[it]
	f := failure.ItemFailure{Action: s.onItem, Reason: reason, Err: err}
	run := max(int(st.run), 1)
	if retry.RetriesItems(f.Action) {
		f.Retry = s.wf.OnItemFailure(retry.ItemFailure{Run: run, LastDelay: time.Duration(st.itemDelay), Err: err}, retry.Counts{}, s.rnd)
	}
	if f.NeedsClaim() {
		f.Grant = s.claim(st)
	}
	switch v := f.Verdict(); v.Kind {
	case failure.EndItemRetry:
		st.run = int32(run + 1)
		st.itemDelay = int64(v.Delay)
		st.step = 0
		st.started = 0 // a new run: agent_timeout counts afresh
		s.apply(st, retry.State{})
		s.retryLater(a, it, v.Delay)
	default: // failure.EndGiveUp, with the item's outcome
		s.finish(st, v.Outcome, v.Reason)
	}
	s.slotFree(a)
}

// finish gives the item its outcome (the result the agent publishes) and
// applies the coordinator's policies to it.
func (s *sim) finish(st *itemState, outcome, reason string) {
	if st.flags&flagFinal != 0 {
		return
	}
	s.release(st)
	if s.ended {
		return // a late result: the item was counted not_run
	}
	s.done++
	r := &s.res
	switch outcome {
	case messages.OutcomeSucceeded:
		r.Succeeded++
		if st.flags&flagFailedOnce != 0 {
			r.Recovered++
		}
	case messages.OutcomeDeadLettered:
		r.DeadLettered++
	case messages.OutcomeSkipped:
		r.Skipped++
	case messages.OutcomeFailed:
		r.Failed++
	}
	if reason != "" && outcome != messages.OutcomeSkipped {
		r.Reasons[reason]++
	}
	// The coordinator's decision: error_policy stops, then completion.
	failed := outcome == messages.OutcomeFailed || outcome == messages.OutcomeDeadLettered
	if end, state, reason := s.wf.MapEnd(s.tally(), failed, true); end {
		s.endMap(state, reason)
	}
}

// tally is the job's counts as retry.Workflow.MapEnd reads them.
func (s *sim) tally() retry.Tally {
	r := &s.res
	return retry.Tally{Items: s.n, Succeeded: r.Succeeded, Failed: r.Failed, DeadLettered: r.DeadLettered, Skipped: r.Skipped}
}

// release acks or terminates the item's message.
func (s *sim) release(st *itemState) {
	if st.flags&flagFinal == 0 {
		st.flags |= flagFinal
		s.pending--
	}
}

// endMap ends the map phase: items without an outcome are not run, and the
// queued messages are purged.
func (s *sim) endMap(state, reason string) {
	if s.ended {
		return
	}
	s.ended = true
	s.res.NotRun = s.n - s.done
	s.res.State, s.res.Reason = state, reason
	s.res.Duration = time.Duration(s.now)
}

// retryLater is the agent's retryLater after agent a's run of the item
// failed: a short retry waits in a and goes back into its buffer when due
// (a local retry: the same delivery, while the delivery is young and at
// most itemrun.MaxLocalRetries in a row), any other is a delayed nak.
func (s *sim) retryLater(a, it int32, d time.Duration) {
	st := &s.items[it]
	f := &s.cfg.Fleet
	if d <= f.LocalRetryMax && int(st.local) < itemrun.MaxLocalRetries && s.now+int64(d)-(st.delivered-1) < int64(f.AckWait/3) {
		st.local++
		st.flags |= flagLocal
		s.events.push(event{at: s.now + int64(d), kind: evLocal, item: it, agent: a})
		return
	}
	s.nak(it, d)
}

// nak redelivers the item after d (at least 1 ms, as the agent's nakDelay).
func (s *sim) nak(it int32, d time.Duration) {
	s.events.push(event{at: s.now + int64(max(d, time.Millisecond)), kind: evReady, item: it})
}

// settle records the delivery's breaker outcome, once per delivery.
func (s *sim) settle(st *itemState, o retry.Outcome) {
	if s.breaker == nil || st.flags&flagSettled != 0 {
		return
	}
	st.flags |= flagSettled
	t := retry.Ticket{}
	if st.epoch != 0 {
		t = retry.Ticket{Probe: true, Epoch: s.at(st.epoch)}
	}
	s.setBreaker(s.breaker.Settle(s.tm(s.now), s.bst, t, o))
}

// settleStep records the outcome of a run with its step's own breaker, if
// it admitted the run.
func (s *sim) settleStep(st *itemState, o retry.Outcome) {
	if st.flags&flagStepTicket == 0 {
		return
	}
	st.flags &^= flagStepTicket
	sm := &s.steps[st.step]
	t := retry.Ticket{}
	if st.stepEpoch != 0 {
		t = retry.Ticket{Probe: true, Epoch: s.at(st.stepEpoch)}
	}
	s.sbst = sm.breaker.Settle(s.tm(s.now), s.sbst, t, o)
}

// setBreaker stores the breaker's new state and notes a transition.
func (s *sim) setBreaker(next retry.BreakerState) {
	from, to := stateName(s.bst), stateName(next)
	s.bst = next
	if from == to {
		return
	}
	b := s.res.Breaker
	if from == retry.CircuitOpen {
		b.OpenFor += time.Duration(s.now - s.openSince)
	}
	if to == retry.CircuitOpen {
		b.Opened++
		s.openSince = s.now
	}
	if len(b.Transitions) < MaxTransitions {
		b.Transitions = append(b.Transitions, Transition{At: time.Duration(s.now), From: from, To: to})
	}
}

func stateName(st retry.BreakerState) string {
	if st.State == "" {
		return retry.CircuitClosed
	}
	return st.State
}

// state is the item's current step's retry state, as the agent reads it
// from fleet_items.
func (s *sim) state(st *itemState) retry.State {
	return retry.State{
		Attempts: int(st.attempts), FirstFailure: s.at(st.firstFailure),
		DelaySpent: time.Duration(st.spent), LastDelay: time.Duration(st.lastDelay),
	}
}

// apply stores a retry state into the item (retry.State.ApplyTo).
func (s *sim) apply(st *itemState, rs retry.State) {
	st.attempts = int32(rs.Attempts)
	st.firstFailure = s.virt(rs.FirstFailure)
	st.spent, st.lastDelay = int64(rs.DelaySpent), int64(rs.LastDelay)
}

// tm is virtual time v as a wall-clock time.
func (s *sim) tm(v int64) time.Time { return s.base.Add(time.Duration(v)) }

// at decodes a stored time (virtual + 1, 0 = none).
func (s *sim) at(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return s.tm(v - 1)
}

// virt encodes t as a stored time.
func (s *sim) virt(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return int64(t.Sub(s.base)) + 1
}

// result finishes the run's Result.
func (s *sim) result() *Result {
	r := &s.res
	r.Budget.Consumed = s.rec.Consumed
	if b := r.Breaker; b != nil && stateName(s.bst) == retry.CircuitOpen {
		b.OpenFor += time.Duration(s.now - s.openSince)
	}
	if r.Items > 0 {
		r.Amplification = float64(r.Attempts) / float64(r.Items)
	}
	if r.Phases != nil {
		last := max(s.now, int64(r.Duration))
		ends := []int64{0, min(s.phaseEnds[0], last), min(s.phaseEnds[1], last), last}
		for i := range r.Phases {
			p := &r.Phases[i]
			p.From, p.To = time.Duration(ends[i]), time.Duration(ends[i+1])
			if p.Items > 0 {
				p.Amplification = float64(p.Attempts) / float64(p.Items)
			}
		}
		if s.dep.Outage <= 0 {
			r.Phases = r.Phases[:1]
			r.Phases[0].To = time.Duration(s.now)
		}
	}
	for i := range r.Series.Attempts {
		if rate := r.Series.Rate(i); rate > r.PeakRate {
			r.PeakRate, r.PeakAt = rate, time.Duration(i)*r.Series.Bucket
		}
	}
	return r
}
