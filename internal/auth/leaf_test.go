package auth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/auth/authtest"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// With a JetStream domain, every role's JetStream grants are also given
// in the domain's form, and nothing else is added.
func TestPermissionsWithDomain(t *testing.T) {
	p, err := auth.RolePermissions(auth.RoleAgent, messages.MustNames("fleet"), "gpu")
	require.NoError(t, err)
	d := p.WithDomain("hub")
	all := strings.Join(d.Publish.Allow, " ")
	require.Contains(t, all, "$JS.API.CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu")
	require.Contains(t, all, "$JS.hub.API.CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu")
	require.Contains(t, all, "$JS.hub.API.$KV.fleet_items.gpu.>")
	var api int
	for _, s := range p.Publish.Allow {
		if strings.HasPrefix(s, "$JS.API.") || strings.HasPrefix(s, "$KV.") {
			api++
		}
	}
	require.Len(t, d.Publish.Allow, len(p.Publish.Allow)+api)
	require.Equal(t, p.Subscribe, d.Subscribe)
	require.Equal(t, p, p.WithDomain(""))
}

// fleetctl auth init --leaf site-b writes the link's user into auth.conf
// and the leaf's configuration, secret, beside the seeds.
func TestInitWritesALeaf(t *testing.T) {
	dir := t.TempDir()
	res, err := auth.Init(auth.Options{Dir: dir, Pools: []string{"default"}, Leaves: []string{"site-b"}, JSDomain: "hub"})
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, auth.LeafConfFile("site-b"))}, res.Leaves)
	st, err := os.Stat(res.Leaves[0])
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "it holds the link's seed")
	var leaf, agentB *auth.User
	for i, u := range res.Users {
		switch u.Name {
		case auth.LeafUser("site-b"):
			leaf = &res.Users[i]
		case auth.AgentUser("site-b"):
			agentB = &res.Users[i]
		}
	}
	require.NotNil(t, leaf)
	require.NotNil(t, agentB, "a leaf's pool gets its agent user")
	require.Equal(t, auth.RoleLeaf, leaf.Role)
	require.Equal(t, agentB.Permissions.Publish, leaf.Permissions.Publish, "the link may send what the agent may")
	require.Equal(t, agentB.Permissions.Subscribe, leaf.Permissions.Subscribe, "and receive what the agent may, in its inboxes")
	conf, err := os.ReadFile(res.Leaves[0])
	require.NoError(t, err)
	require.Contains(t, string(conf), agentB.NKey)
	require.Contains(t, string(conf), `"tls://nats-1:7422"`)
	require.NotContains(t, string(conf), "ca_file", "TLS only with --tls")
	res, err = auth.Init(auth.Options{Dir: t.TempDir(), Leaves: []string{"site-b"}, TLS: true, ServerDir: "/etc/nats/auth"})
	require.NoError(t, err)
	conf, err = os.ReadFile(res.Leaves[0])
	require.NoError(t, err)
	require.Contains(t, string(conf), `tls: { ca_file: "/etc/nats/auth/ca.pem" }`)

	_, err = auth.Init(auth.Options{Dir: t.TempDir(), JSDomain: "a.b"})
	require.ErrorContains(t, err, "js_domain")
	_, err = auth.Init(auth.Options{Dir: t.TempDir(), Leaves: []string{"a.b"}})
	require.Error(t, err)
}

// The role keys hold through a leaf node. A hub secured with `fleetctl
// auth init --leaf site-b --js-domain hub` and a leaf server with the
// generated leaf configuration: site-b's agent, connected to the leaf
// only, runs the pool's job without a refusal; it gets the same refusals
// behind the leaf as at the hub for what its role may not do (another
// pool's work, results, the API); and the link does not widen anyone's
// permissions: a user the leaf lets do anything still reaches at the hub
// only what site-b's agent may.
func TestRoleKeysHoldThroughTheLeaf(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	srv, res := authtest.RunServer(t, auth.Options{Pools: []string{"default", "gpu"}, Leaves: []string{"site-b"}, JSDomain: "hub",
		LeafHubURLs: []string{fmt.Sprintf("nats-leaf://127.0.0.1:%d", port)}}, natstest.WithLeafHub(port, "hub"))
	parsed := authtest.LoadLeaf(t, res, "site-b")
	// A user the leaf lets do anything, in the fleet's account.
	open := natstest.WithConfig(func(o *server.Options) {
		for _, acc := range o.Accounts {
			if acc.Name == auth.DefaultAccount {
				o.Users = append(o.Users, &server.User{Username: "open", Password: "open", Account: acc})
			}
		}
	})
	leaf := natstest.RunLeaf(t, fmt.Sprintf("127.0.0.1:%d", port), authtest.LeafConfig(parsed), open)
	s := &secured{srv: srv, res: res, names: messages.MustNames(""), refused: make(chan error, 1024)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The coordinator at the hub, also through the domain's API.
	cnc, _ := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{JSDomain: "hub", Pools: []string{"site-b", "gpu"}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	coordDone := make(chan error, 1)
	go func() { coordDone <- coord.Run(runCtx) }()
	defer func() { stop(); require.NoError(t, <-coordDone) }()
	select {
	case <-coord.Ready():
	case err := <-coordDone:
		t.Fatalf("coordinator: %v", err)
	}
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	for _, pool := range []string{"site-b", "gpu"} {
		_, err := provision.EnsurePool(ctx, cjs, s.names, pool, provision.Config{})
		require.NoError(t, err)
	}

	// site-b's agent behind the leaf runs its pool's job, refused nothing.
	atLeaf := func(user string) (*nats.Conn, *asyncErrs) {
		ae := &asyncErrs{perm: make(chan error, 16), refused: make(chan error, 16)}
		return leaf.Connect(t, append(authtest.User(t, res, user), nats.ErrorHandler(ae.handler), nats.Name(user))...), ae
	}
	anc, aerrs := atLeaf(auth.AgentUser("site-b"))
	ag := agent.New(anc, agent.Config{Pool: "site-b", JSDomain: "hub", Concurrency: 4, ShutdownTimeout: time.Second}).HandleBuiltins()
	agentDone := make(chan error, 1)
	agentCtx, stopAgent := context.WithCancel(ctx)
	go func() { agentDone <- ag.Run(agentCtx) }()
	snc, _ := s.connect(t, "submitter")
	cl, err := client.New(snc, "")
	require.NoError(t, err)
	reply, err := cl.JobSubmit(ctx, []byte(`{"id": "siteb", "pool": "site-b", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	st, err := cl.JobWait(ctx, reply.JobID, 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Succeeded, "%+v", st)
	stopAgent()
	require.NoError(t, <-agentDone)
	require.Empty(t, aerrs.violations(), "the agent behind the leaf was refused nothing")

	// The same refusals behind the leaf as at the hub.
	ops := []forbidden{
		request("$JS.hub.API.CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu").named("pull another pool's work"),
		request(api("CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu")).named("pull another pool's work without the domain"),
		request("$JS.hub.API.CONSUMER.INFO.FLEET_WORK.agents-gpu").named("bind to another pool's consumer"),
		request("$JS.hub.API.STREAM.MSG.GET.FLEET_WORK").named("read the work stream"),
		publish("fleet.results.gpu.victim").named("report for another pool"),
		publish("fleet.dlq.gpu.victim").named("dead-letter for another pool"),
		publish("fleet.dlqin.gpu.victim").named("dead-letter into another pool's quota"),
		publish("fleet.work.site-b.victim").named("inject work into its own pool"),
		request("fleet.api.jobs.submit").named("submit a job"),
		subscribe("fleet.work.>").named("listen to work"),
	}
	for _, where := range []string{"hub", "leaf"} {
		for _, op := range ops {
			t.Run("at the "+where+" agent-site-b may not "+op.what, func(t *testing.T) {
				var nc *nats.Conn
				var ae *asyncErrs
				if where == "hub" {
					nc, ae = s.connect(t, auth.AgentUser("site-b"))
				} else {
					nc, ae = atLeaf(auth.AgentUser("site-b"))
				}
				go func() { _ = op.do(nc) }()
				select {
				case v := <-ae.perm:
					// The hub maps the domain's API to its own before it
					// checks: its refusal names $JS.API.
					_, rest, _ := strings.Cut(op.subject, ".API.")
					if rest == "" || where == "leaf" {
						rest = op.subject
					}
					require.Contains(t, v.Error(), rest)
				case <-time.After(5 * time.Second):
					t.Fatalf("no permissions violation for %s", op.subject)
				}
			})
		}
	}

	// The link carries no more than site-b's agent may: a user the leaf
	// allows everything gets nothing else from the hub.
	// It uses site-b's agent's inboxes: the only ones the link carries.
	var agentKey string
	for _, u := range res.Users {
		if u.Name == auth.AgentUser("site-b") {
			agentKey = u.NKey
		}
	}
	onc := leaf.Connect(t, nats.UserInfo("open", "open"), nats.CustomInboxPrefix(natsconn.InboxPrefix(agentKey)))
	_, err = onc.Request("$JS.hub.API.CONSUMER.INFO.FLEET_WORK.agents-site-b", nil, 5*time.Second)
	require.NoError(t, err, "what the link allows gets through (the test can tell)")
	for _, subject := range []string{
		"$JS.hub.API.CONSUMER.INFO.FLEET_WORK.agents-gpu",
		"$JS.hub.API.STREAM.INFO.FLEET_WORK",
		"$JS.hub.API.STREAM.PURGE.FLEET_DLQ",
		"fleet.api.jobs.list",
		"fleet.work.gpu.victim",
	} {
		_, err := onc.Request(subject, []byte(`{}`), 2*time.Second)
		require.True(t, errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout), "%s through the link: %v", subject, err)
	}
	ws, err := cjs.Stream(ctx, s.names.WorkStream())
	require.NoError(t, err)
	info, err := ws.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing was injected into the work stream")
}
