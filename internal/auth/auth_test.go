package auth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/auth/authtest"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/ui"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// secured is an embedded server configured with the files auth.Init
// writes, included from a server configuration the way a deployment does.
type secured struct {
	srv   *natstest.Server
	res   *auth.Result
	names messages.Names
	// refused receives every permissions violation of every connection.
	refused chan error
}

func runSecured(t *testing.T, o auth.Options) *secured {
	t.Helper()
	srv, res := authtest.RunServer(t, o)
	return &secured{srv: srv, res: res, names: messages.MustNames(o.Prefix), refused: make(chan error, 1024)}
}

// asyncErrs records a connection's asynchronous errors.
type asyncErrs struct {
	mu      sync.Mutex
	errs    []error
	perm    chan error
	refused chan error // shared by the connections of a test
}

func (a *asyncErrs) handler(_ *nats.Conn, sub *nats.Subscription, err error) {
	if sub != nil {
		err = fmt.Errorf("%w (subscription %q)", err, sub.Subject)
	}
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	if errors.Is(err, nats.ErrPermissionViolation) {
		select {
		case a.perm <- err:
		default:
		}
		select {
		case a.refused <- err:
		default:
		}
	}
}

func (a *asyncErrs) violations() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var v []error
	for _, err := range a.errs {
		if errors.Is(err, nats.ErrPermissionViolation) {
			v = append(v, err)
		}
	}
	return v
}

// connect connects as user and records its asynchronous errors.
// startAgent does what `coordinator --pools default` does at start (agents
// only bind), with the coordinator's cjs, then runs an agent of pool
// default as its role's user until runCtx ends: the agent, its refused
// calls, and Run's error once it returns.
func (s *secured) startAgent(t *testing.T, ctx, runCtx context.Context, cjs jetstream.JetStream) (*agent.Agent, *asyncErrs, <-chan error) {
	t.Helper()
	_, err := provision.EnsurePool(ctx, cjs, s.names, "default", provision.Config{AckWait: 5 * time.Second})
	require.NoError(t, err, "ensure pool")
	anc, aerrs := s.connect(t, auth.AgentUser("default"))
	ag := agent.New(anc, agent.Config{Concurrency: 4, ShutdownTimeout: time.Second}).HandleBuiltins()
	done := make(chan error, 1)
	go func() { done <- ag.Run(runCtx) }()
	return ag, aerrs, done
}

func (s *secured) connect(t *testing.T, user string) (*nats.Conn, *asyncErrs) {
	t.Helper()
	ae := &asyncErrs{perm: make(chan error, 16), refused: s.refused}
	nc := s.srv.Connect(t, append(authtest.User(t, s.res, user), nats.ErrorHandler(ae.handler), nats.Name(user))...)
	return nc, ae
}

func TestInitWritesEveryFile(t *testing.T) {
	dir := t.TempDir()
	res, err := auth.Init(auth.Options{Dir: dir, Pools: []string{"gpu", "default", "gpu"}, TLS: true, ServerDir: "/etc/nats/auth"})
	require.NoError(t, err)
	var names []string
	for _, f := range res.Files {
		names = append(names, filepath.Base(f))
	}
	require.Equal(t, []string{"coordinator.nk", "agent-default.nk", "agent-gpu.nk", "submitter.nk", "operator.nk",
		auth.WorkSigningFile, auth.WorkPublicKeyFile, auth.AccountsFile, auth.CAFile, auth.ServerCertFile, auth.ServerKeyFile, auth.TLSConfFile, auth.LeafTLSConfFile, auth.RoutesFile}, names)
	for _, n := range []string{"coordinator.nk", auth.WorkSigningFile, auth.ServerKeyFile, auth.RoutesFile} {
		st, err := os.Stat(filepath.Join(dir, n))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), n)
	}
	tlsConf, err := os.ReadFile(filepath.Join(dir, auth.TLSConfFile))
	require.NoError(t, err)
	require.Contains(t, string(tlsConf), `"/etc/nats/auth/server-cert.pem"`)

	// A second run refuses to replace the seeds, unless forced.
	_, err = auth.Init(auth.Options{Dir: dir})
	require.ErrorIs(t, err, auth.ErrExists)
	_, err = auth.Init(auth.Options{Dir: dir, Force: true})
	require.NoError(t, err)
}

func TestPermissionsOfAgentNameOnlyItsPool(t *testing.T) {
	p, err := auth.RolePermissions(auth.RoleAgent, messages.MustNames("fleet"), "gpu")
	require.NoError(t, err)
	all := strings.Join(p.Publish.Allow, " ")
	require.Contains(t, all, "$JS.API.CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu")
	require.NotContains(t, all, "agents-default")
	require.NotContains(t, all, "CONSUMER.CREATE.FLEET_WORK")
	require.NotContains(t, all, "fleet.api.")
	require.NotContains(t, all, "fleet.work.")
	require.Equal(t, []string{"_INBOX." + auth.UserKey + ".>", "fleet.events.*.map_ended",
		"$SRV.PING", "$SRV.PING.jetfleet-agent", "$SRV.PING.jetfleet-agent.*",
		"$SRV.INFO", "$SRV.INFO.jetfleet-agent", "$SRV.INFO.jetfleet-agent.*",
		"$SRV.STATS", "$SRV.STATS.jetfleet-agent", "$SRV.STATS.jetfleet-agent.*", "fleet.agent.gpu.*.status"}, p.Subscribe.Allow)
	require.True(t, p.AllowResponses, "an agent answers micro discovery requests")
	require.Equal(t, []string{"_INBOX.UABC.>", "fleet.events.*.map_ended",
		"$SRV.PING", "$SRV.PING.jetfleet-agent", "$SRV.PING.jetfleet-agent.*",
		"$SRV.INFO", "$SRV.INFO.jetfleet-agent", "$SRV.INFO.jetfleet-agent.*",
		"$SRV.STATS", "$SRV.STATS.jetfleet-agent", "$SRV.STATS.jetfleet-agent.*", "fleet.agent.gpu.*.status"}, p.ForUser("UABC").Subscribe.Allow)

	_, err = auth.RolePermissions("root", messages.MustNames("fleet"), "")
	require.ErrorIs(t, err, auth.ErrUnknownRole)
	_, err = auth.RolePermissions(auth.RoleAgent, messages.MustNames("fleet"), "a.b")
	require.Error(t, err)
}

// Each role does its job: a coordinator, an agent, a submitter and an
// operator, each with its own generated nkey, run a flaky job to the end
// (retries, retry budget, item state, dead letters) and no connection is
// ever refused anything.
func TestRolesRunAJob(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("timed out"))
	defer cancel()
	// A refusal fails the test at once: a denied JetStream call would
	// otherwise only time out.
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	go func() {
		select {
		case err := <-s.refused:
			refuse(err)
		case <-ctx.Done():
		}
	}()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v (cause: %v)", what, err, context.Cause(ctx))
		}
	}

	cnc, cerrs := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{})
	require.NoError(t, err)
	coordDone := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { coordDone <- coord.Run(runCtx) }()
	select {
	case <-coord.Ready():
	case err := <-coordDone:
		t.Fatalf("coordinator: %v (cause: %v)", err, context.Cause(ctx))
	case <-ctx.Done():
		t.Fatalf("coordinator not ready: %v", context.Cause(ctx))
	}
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	ag, aerrs, agentDone := s.startAgent(t, ctx, runCtx, cjs)

	snc, serrs := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	// An input uploaded to the object store, as fleetctl submit does.
	sjs, err := jetstream.New(snc)
	require.NoError(t, err)
	up, err := upload.PutBytes(ctx, sjs, s.names.UploadsBucket(), "x7q2/items.json", []byte(`{"items": [`+items(30)+`]}`))
	must(err, "submitter uploads an input")
	reply, err := sub.JobSubmit(ctx, []byte(`{
		"id": "roles",
		"input": "objstore://fleet_uploads/x7q2/items.json", "input_digest": "`+up.Digest+`",
		"json_path": "$.items[*]",
		"retry_budget": "100%",
		"agent_template": [{"handler": "flaky", "with": {"fail_rate": 0.4, "permanent_rate": 0.1, "seed": 5},
			"retry_config": {"attempts": 4, "backoff": "fixed", "initial_delay": "20ms", "jitter": false}}]
	}`))
	must(err, "submit")
	st, err := sub.JobWait(ctx, reply.JobID, 50*time.Millisecond, nil)
	must(err, "wait")
	require.Equal(t, int64(30), st.Succeeded+st.DeadLettered, "%+v", st)
	require.Positive(t, st.DeadLettered)
	require.Positive(t, st.Retries)
	roles := st
	// The submitter lists jobs.
	_, err = sub.JobList(ctx, messages.ListRequest{})
	must(err, "submitter lists")

	// A durable submission (nats pub fleet.jobs.submit) whose retry budget
	// runs out, so agents also publish events, and whose circuit breaker
	// agents share through KV.
	_, err = sjs.Publish(ctx, s.names.JobsSubmitSubject(), []byte(`{
		"id": "durable", "items": [`+items(10)+`], "retry_budget": 1,
		"error_policy": {"circuit_breaker": {"failure_threshold": 1000, "success_threshold": 1, "timeout": "1s", "half_open_requests": 1}},
		"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
			"retry_config": {"attempts": 3, "backoff": "fixed", "initial_delay": "10ms"}}],
		"reduce": [{"shell": "test -s ${map.results} && echo ${map.successful}"}]
	}`), jetstream.WithMsgID("durable"))
	must(err, "durable submit")
	st, err = sub.JobWait(ctx, "durable", 50*time.Millisecond, nil)
	must(err, "wait durable")
	require.Equal(t, int64(10), st.Succeeded+st.DeadLettered, "%+v", st)
	require.True(t, st.Budget.Exhausted, "%+v", st.Budget)
	// Its reduce step ran on an agent, which read the map results from
	// the object store.
	require.NotNil(t, st.Reduce)
	require.Equal(t, messages.OutcomeSucceeded, st.Reduce.State, "%+v", st.Reduce)

	// A step's own circuit breaker, under the key <pool>.<job>.<step> of the same
	// bucket: the agent's grants cover its writes and its events.
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "stepbreaker", "items": [`+items(6)+`],
		"agent_template": [{"handler": "flaky", "with": {"fail_attempts": 1},
			"retry_config": {"attempts": 1, "circuit_breaker": {"failure_threshold": 1, "timeout": "1h"}}}]}`))
	must(err, "submit with a step breaker")
	st, err = sub.JobWait(ctx, "stepbreaker", 50*time.Millisecond, nil)
	must(err, "wait stepbreaker")
	require.EqualValues(t, 6, st.DeadLettered, "%+v", st)
	breakers, err := cjs.KeyValue(ctx, s.names.BreakerBucket())
	must(err, "coordinator opens the breaker bucket")
	e, err := breakers.Get(ctx, "default.stepbreaker.0")
	must(err, "the step breaker's state")
	require.Contains(t, string(e.Value()), `"state":"open"`)

	// The operator reads status, lists jobs, reads the DLQ stream and may
	// call the DLQ API (whether or not the coordinator serves it yet).
	onc, oerrs := s.connect(t, "operator")
	op, err := client.New(onc, "")
	require.NoError(t, err)
	_, err = op.JobStatus(ctx, "roles")
	must(err, "operator status")
	_, err = op.JobList(ctx, messages.ListRequest{})
	must(err, "operator list")
	ojs, err := jetstream.New(onc)
	require.NoError(t, err)
	dlq, err := ojs.Stream(ctx, s.names.DLQStream())
	must(err, "operator DLQ stream info")
	// The agent's dead letters reach the DLQ stream from its pool's stream
	// a moment after the job counted them.
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(s.names.DLQSubject("default", "roles")))
		must(err, "operator DLQ stream info by subject")
		if got := info.State.Subjects[s.names.DLQSubject("default", "roles")]; got != uint64(roles.DeadLettered) {
			return fmt.Errorf("the DLQ stream holds %d of the job's %d dead letters", got, roles.DeadLettered)
		}
		return nil
	})
	oc, err := dlq.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.names.DLQSubject("default", "roles")}})
	must(err, "operator DLQ consumer")
	m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
	must(err, "operator DLQ read")
	require.Equal(t, s.names.DLQSubject("default", "roles"), m.Subject())
	_, err = ojs.Consumer(ctx, s.names.WorkStream(), s.names.AgentsConsumer("default"))
	must(err, "operator reads consumer lag")
	// The dashboard (fleetctl ui, operator credentials) watches the job
	// records and the agents' presence, which the agent writes with its
	// own credentials, and follows the events.
	jobsKV, err := ojs.KeyValue(ctx, s.names.JobsBucket())
	must(err, "operator opens the jobs bucket")
	jw, err := jobsKV.WatchAll(ctx)
	must(err, "operator watches the jobs bucket")
	select {
	case e := <-jw.Updates():
		require.NotNil(t, e, "the jobs bucket holds records")
	case <-ctx.Done():
		t.Fatalf("no job record watched: %v", context.Cause(ctx))
	}
	must(jw.Stop(), "stop the jobs watch")
	agentsKV, err := ojs.KeyValue(ctx, s.names.AgentsBucket())
	must(err, "operator opens the agents bucket")
	aw, err := agentsKV.WatchAll(ctx)
	must(err, "operator watches the agents bucket")
	select {
	case e := <-aw.Updates():
		require.NotNil(t, e, "the agent's presence is in the bucket")
		require.Equal(t, wire.AgentKey("default", ag.Name()), e.Key())
	case <-ctx.Done():
		t.Fatalf("no agent presence watched: %v", context.Cause(ctx))
	}
	must(aw.Stop(), "stop the agents watch")
	evSub, err := onc.SubscribeSync(s.names.EventsFilter())
	must(err, "operator subscribes to events")
	must(onc.Flush(), "flush the events subscription")
	evStream, err := ojs.Stream(ctx, s.names.EventsStream())
	must(err, "operator events stream")
	ec, err := evStream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.names.EventSubject("roles", ">")}})
	must(err, "operator reads a job's events")
	_, err = ec.Next(jetstream.FetchMaxWait(5 * time.Second))
	must(err, "operator reads an event")
	// The dashboard itself, on the operator's connection: every page
	// renders, and (checked at the end) nothing was refused.
	dash, err := ui.New(onc, ui.Config{})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dashCtx, stopDash := context.WithCancel(ctx)
	dashDone := make(chan error, 1)
	go func() { dashDone <- dash.Serve(dashCtx, ln) }()
	for _, page := range []string{"/", "/jobs/roles", "/dlq?job=roles", "/agents"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+page, nil)
		must(err, "dashboard request "+page)
		req.Header.Set("Authorization", "Bearer "+dash.Token())
		resp, err := http.DefaultClient.Do(req)
		must(err, "dashboard "+page)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", page, body)
	}
	stopDash()
	must(<-dashDone, "dashboard stops")
	// The operator cancels a job that is still running.
	reply, err = sub.JobSubmit(ctx, []byte(`{"id": "slow", "items": [`+items(20)+`],
		"agent_template": [{"handler": "sleep", "with": {"duration": "1m"}}]}`))
	must(err, "submit slow")
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, err := op.JobStatus(ctx, reply.JobID)
		if err != nil {
			return err
		}
		if st.State != messages.StateRunning {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	_, err = op.JobCancel(ctx, reply.JobID)
	must(err, "operator cancels")
	st, err = op.JobWait(ctx, reply.JobID, 50*time.Millisecond, nil)
	must(err, "wait cancelled")
	require.Equal(t, messages.StateCancelled, st.State)
	_, err = evSub.NextMsg(5 * time.Second)
	must(err, "operator receives a live event")

	stats := op.Call(ctx, messages.EndpointDLQStats, messages.JobRequest{JobID: "roles"}, nil)
	var apiErr *messages.APIError
	if stats != nil && !errors.Is(stats, client.ErrNoCoordinator) && !errors.As(stats, &apiErr) {
		t.Fatalf("dlq.stats: %v", stats)
	}

	stop()
	must(<-agentDone, "agent")
	must(<-coordDone, "coordinator")
	refuse(nil)
	for role, ae := range map[string]*asyncErrs{"coordinator": cerrs, "agent": aerrs, "submitter": serrs, "operator": oerrs} {
		require.Empty(t, ae.violations(), "%s was refused something it needs", role)
	}
}

func items(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"i%d"}`, i)
	}
	return b.String()
}
