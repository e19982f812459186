package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// starts records when each item's step started, and how often.
type starts struct {
	mu    sync.Mutex
	runs  map[int64]int
	times []time.Time
}

func newStarts() *starts { return &starts{runs: map[int64]int{}} }

func (s *starts) handler(d time.Duration) agent.HandlerFunc {
	return func(ctx context.Context, call *agent.Call) (any, error) {
		s.mu.Lock()
		s.runs[call.Index]++
		s.times = append(s.times, time.Now())
		s.mu.Unlock()
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	}
}

// after counts the starts later than t, and returns the latest start.
func (s *starts) after(t time.Time) (n int, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, at := range s.times {
		if at.After(t) {
			n++
		}
		if at.After(last) {
			last = at
		}
	}
	return n, last
}

func inlineItems(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	return "[" + strings.Join(items, ",") + "]"
}

// jobMessages counts the job's messages in the work stream (queued or
// being run) and the pool consumer's deliveries awaiting an ack.
func jobMessages(t *testing.T, js jetstream.JetStream, job string) (queued uint64, ackPending int) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "FLEET_WORK")
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("fleet.work.*."+job))
	require.NoError(t, err)
	for _, n := range info.State.Subjects {
		queued += n
	}
	cons, err := s.Consumer(ctx, "agents-default")
	require.NoError(t, err)
	ci, err := cons.Info(ctx)
	require.NoError(t, err)
	return queued, ci.NumAckPending
}

// step is a job step: its handler's name and what the agents run for it.
type step struct {
	handler string
	run     agent.HandlerFunc
}

// pauseFleet is what each pause test starts: a server, a coordinator, its
// agents, a client, and the job it pauses.
type pauseFleet struct {
	srv   *fleettest.Server
	coord *proc
	cl    *jfclient.Client
	id    string
}

// startPauseFleet starts a server, a coordinator with cfg (calmProvision
// unless cfg sets a Provision) and agents agents (a0, a1, ..., 4 slots
// each) that handle steps, and submits job id: n inline items, each
// running steps in order.
func startPauseFleet(t *testing.T, cfg coordinator.Config, agents int, id string, n int, steps ...step) pauseFleet {
	t.Helper()
	if cfg.Provision == (coordinator.Provision{}) {
		cfg.Provision = coordinator.Provision(calmProvision)
	}
	f := pauseFleet{srv: fleettest.RunServer(t)}
	f.coord = startCoordinator(t, f.srv.URL(), cfg)
	handlers := map[string]agent.HandlerFunc{}
	template := make([]string, len(steps))
	for i, s := range steps {
		handlers[s.handler] = s.run
		template[i] = fmt.Sprintf(`{"handler": %q}`, s.handler)
	}
	for i := range agents {
		startAgent(t, f.srv.URL(), agent.Config{Name: fmt.Sprintf("a%d", i), Concurrency: 4}, handlers)
	}
	f.cl = client(t, f.srv)
	f.id = submit(t, f.cl, fmt.Sprintf(`{"id": %q, "items": %s, "agent_template": [%s]}`, id, inlineItems(n), strings.Join(template, ", ")))
	return f
}

// Pausing a running 2,000-item job: no step starts later than a second
// after the pause returned, the job's state is paused, its items wait in
// the park stream and none in the work stream or on the consumer; resumed,
// the job finishes with every item run once.
func TestPauseResumeJob(t *testing.T) {
	t.Parallel()
	const n = 2000
	rec := newStarts()
	f := startPauseFleet(t, coordinator.Config{}, 2, "pausable", n, step{"rec", rec.handler(10 * time.Millisecond)})
	srv, cl, id := f.srv, f.cl, f.id
	waitDone(t, cl, id, 200)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	called := time.Now()
	st, err := cl.JobPause(ctx, id)
	require.NoError(t, err)
	paused := time.Now()
	require.Equal(t, messages.StatePaused, st.State)
	require.Equal(t, messages.PausedByJob, st.PausedBy)
	t.Logf("pause answered in %v", paused.Sub(called).Round(time.Millisecond))

	// Watch for 2 s: running steps finish, nothing new starts.
	<-time.After(2 * time.Second)
	late, last := rec.after(paused.Add(time.Second))
	require.Zero(t, late, "steps started more than 1 s after the pause (last at +%v)", last.Sub(paused))
	t.Logf("last step started %v after the pause was asked for", last.Sub(called).Round(time.Millisecond))

	st, err = cl.JobStatus(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.StatePaused, st.State)
	require.Less(t, st.Succeeded, int64(n), "the job ran to its end before the pause")
	fleettest.WaitFor(t, 10*time.Second, func() error {
		queued, pending := jobMessages(t, srv.JS(), id)
		if queued != 0 || pending != 0 {
			return fmt.Errorf("%d of the job's messages in the work stream, %d awaiting an ack", queued, pending)
		}
		return nil
	})
	list, err := cl.JobList(ctx, messages.ListRequest{State: messages.StatePaused})
	require.NoError(t, err)
	require.Len(t, list, 1, "list shows the job paused")

	st, err = cl.JobResume(ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, messages.StatePaused, st.State)
	st = waitJob(t, cl, id, time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.runs, n, "every item ran")
	for idx, runs := range rec.runs {
		require.Equal(t, 1, runs, "item %d ran %d times", idx, runs)
	}
}

// A paused job stays paused when its leader dies: the next leader reads
// the pause from KV, starts nothing of the job, and on resume moves back
// the items the agents held in the dead leader's term; the job ends with
// every item run once.
func TestPauseSurvivesFailover(t *testing.T) {
	t.Parallel()
	const n = 600
	cfg := coordinator.Config{Provision: coordinator.Provision(calmProvision), LeaseTTL: 2 * time.Second}
	cfg.Holder = "first"
	rec := newStarts()
	f := startPauseFleet(t, cfg, 1, "failover", n, step{"rec", rec.handler(10 * time.Millisecond)})
	first, cl, id := f.coord, f.cl, f.id
	waitDone(t, cl, id, 50)
	cfg.Holder = "second"
	startCoordinator(t, f.srv.URL(), cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.JobPause(ctx, id)
	require.NoError(t, err)
	paused := time.Now()
	require.Equal(t, messages.StatePaused, st.State)
	first.kill(t)

	// The second coordinator leads within the lease TTL and serves the
	// job's live status: paused, nothing started since.
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.Source != messages.StatusFromRunner || st.State != messages.StatePaused {
			return fmt.Errorf("state %s from %q", st.State, st.Source)
		}
		return nil
	})
	<-time.After(time.Second) // the new leader's runner had time to publish, if it would
	late, last := rec.after(paused.Add(time.Second))
	require.Zero(t, late, "steps started more than 1 s after the pause (last at +%v)", last.Sub(paused))

	_, err = cl.JobResume(ctx, id)
	require.NoError(t, err)
	st = waitJob(t, cl, id, time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.runs, n)
	for idx, runs := range rec.runs {
		require.Equal(t, 1, runs, "item %d ran %d times", idx, runs)
	}
}

// Pausing a pool pauses its jobs (paused_by pool) and stops its agents
// from starting anything within a second; resumed, the jobs finish.
func TestPausePool(t *testing.T) {
	t.Parallel()
	const n = 1000
	rec := newStarts()
	f := startPauseFleet(t, coordinator.Config{}, 1, "pooled", n, step{"rec", rec.handler(10 * time.Millisecond)})
	cl, id := f.cl, f.id
	waitDone(t, cl, id, 50)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := cl.PoolPause(ctx, "default")
	require.NoError(t, err)
	require.True(t, reply.Paused)
	paused := time.Now()
	fleettest.WaitFor(t, 10*time.Second, func() error {
		st, err := cl.JobStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.State != messages.StatePaused || st.PausedBy != messages.PausedByPool {
			return fmt.Errorf("state %s, paused by %q", st.State, st.PausedBy)
		}
		return nil
	})
	<-time.After(2 * time.Second)
	late, last := rec.after(paused.Add(time.Second))
	require.Zero(t, late, "steps started more than 1 s after the pause (last at +%v)", last.Sub(paused))

	reply, err = cl.PoolResume(ctx, "default")
	require.NoError(t, err)
	require.False(t, reply.Paused)
	st := waitJob(t, cl, id, time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.runs, n)
}

// A pause that comes while an item's first step runs lets that step
// finish and holds the item before its second: no step starts later than
// a second after the pause; resumed, each item runs each step once, the
// held ones from their second step.
func TestPauseHoldsBetweenSteps(t *testing.T) {
	t.Parallel()
	const n = 12
	first, second := newStarts(), newStarts()
	f := startPauseFleet(t, coordinator.Config{}, 1, "twosteps", n,
		step{"first", first.handler(1500 * time.Millisecond)}, step{"second", second.handler(time.Millisecond)})
	cl, id := f.cl, f.id
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if started, _ := first.after(time.Time{}); started < 4 {
			return fmt.Errorf("%d first steps started", started)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.JobPause(ctx, id)
	require.NoError(t, err)
	paused := time.Now()
	<-time.After(3 * time.Second) // the running first steps end meanwhile
	for name, s := range map[string]*starts{"first": first, "second": second} {
		late, last := s.after(paused.Add(time.Second))
		require.Zero(t, late, "%s steps started more than 1 s after the pause (last at +%v)", name, last.Sub(paused))
	}

	_, err = cl.JobResume(ctx, id)
	require.NoError(t, err)
	st := waitJob(t, cl, id, time.Minute)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, n, st.Succeeded)
	for name, s := range map[string]*starts{"first": first, "second": second} {
		s.mu.Lock()
		require.Len(t, s.runs, n, name)
		for idx, runs := range s.runs {
			require.Equal(t, 1, runs, "item %d ran its %s step %d times", idx, name, runs)
		}
		s.mu.Unlock()
	}
}

// Cancelling a paused job ends it with exact counts (what had not run is
// not_run), purges its held copies and drops its pause, so that a job of
// the same id later would not start paused.
func TestCancelPausedJob(t *testing.T) {
	t.Parallel()
	const n = 500
	rec := newStarts()
	f := startPauseFleet(t, coordinator.Config{}, 1, "cancelpaused", n, step{"rec", rec.handler(10 * time.Millisecond)})
	srv, cl, id := f.srv, f.cl, f.id
	waitDone(t, cl, id, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.JobPause(ctx, id)
	require.NoError(t, err)
	park, err := srv.JS().Stream(ctx, "FLEET_PARK_default")
	require.NoError(t, err)
	held := func() uint64 {
		info, err := park.Info(ctx, jetstream.WithSubjectFilter("fleet.parked.default.at."+id+".*.held"))
		require.NoError(t, err)
		return info.State.Msgs
	}
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if held() == 0 {
			return fmt.Errorf("nothing held yet")
		}
		return nil
	})

	_, err = cl.JobCancel(ctx, id)
	require.NoError(t, err)
	st := waitJob(t, cl, id, 30*time.Second)
	require.Equal(t, messages.StateCancelled, st.State)
	require.Positive(t, st.NotRun)
	require.Empty(t, st.PausedBy)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if n := held(); n != 0 {
			return fmt.Errorf("%d held copies of the cancelled job left", n)
		}
		return nil
	})
	kv, err := srv.JS().KeyValue(ctx, "fleet_pause")
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if _, err := kv.Get(ctx, wire.PauseJobKey(id)); err == nil {
			return fmt.Errorf("the pause of the cancelled job is still there")
		}
		return nil
	})
}
