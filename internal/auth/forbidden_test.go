package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// forbidden is one operation a role must be refused.
type forbidden struct {
	what    string
	subject string // what the server's refusal names
	do      func(*nats.Conn) error
}

func request(subject string) forbidden {
	return forbidden{subject: subject, do: func(nc *nats.Conn) error {
		_, err := nc.Request(subject, []byte(`{}`), 3*time.Second)
		return err
	}}
}

func publish(subject string) forbidden {
	return forbidden{subject: subject, do: func(nc *nats.Conn) error {
		if err := nc.Publish(subject, []byte(`{"job_id":"victim","item_id":"a","index":0,"outcome":"succeeded"}`)); err != nil {
			return err
		}
		return nc.Flush()
	}}
}

func subscribe(subject string) forbidden {
	return forbidden{subject: subject, do: func(nc *nats.Conn) error {
		if _, err := nc.SubscribeSync(subject); err != nil {
			return err
		}
		return nc.Flush()
	}}
}

func (f forbidden) named(what string) forbidden { f.what = what; return f }

func api(op string) string { return "$JS.API." + op }

// forbiddenOps is what each role must be refused, under the default prefix
// with pools "default" and "gpu"; the agent is agent-default. docs/security.md
// lists what each role may do; everything else is refused, and these are
// the operations that would hurt.
var forbiddenOps = map[string][]forbidden{
	"agent-default": {
		// The API and the intake.
		request("fleet.api.jobs.submit").named("submit a job"),
		publish("fleet.jobs.submit").named("submit a job durably"),
		request("fleet.api.jobs.cancel").named("cancel a job"),
		request("fleet.api.jobs.status").named("read a job's status"),
		request("fleet.api.dlq.purge").named("purge dead letters through the API"),
		request("fleet.api.dlq.replay").named("replay dead letters"),
		request("$SRV.INFO").named("query the micro service"),
		subscribe("$SRV.INFO.jetfleet").named("answer for the coordinator's micro service"),
		subscribe("$SRV.>").named("answer every micro service's requests"),
		subscribe("$SRV.*.>").named("answer every micro service's named requests"),
		subscribe("$SRV.PING.jetfleet.*").named("answer pings for a coordinator"),
		// Limits: its own pool's shares only.
		publish("$KV.fleet_limits.n.victim").named("configure a limit"),
		publish("$KV.fleet_limits.k.dmljdGlt").named("configure an inline limit"),
		publish("$KV.fleet_limits.p.gpu.n.victim").named("write another pool's share of a limit"),
		subscribe("fleet.agent.gpu.*.status").named("answer for another pool's agents"),
		// Work: only its pool's consumer, and only to pull and ack.
		publish("fleet.work.default.victim").named("inject work into its own pool"),
		publish("fleet.work.gpu.victim").named("inject work into another pool"),
		request(api("CONSUMER.MSG.NEXT.FLEET_WORK.agents-gpu")).named("pull another pool's work"),
		request(api("CONSUMER.INFO.FLEET_WORK.agents-gpu")).named("bind to another pool's consumer"),
		publish("$JS.ACK.FLEET_WORK.agents-gpu.1.1.1.1.1").named("ack another pool's work"),
		request(api("CONSUMER.CREATE.FLEET_WORK.x.fleet.work.>")).named("create a work consumer"),
		request(api("CONSUMER.DURABLE.CREATE.FLEET_WORK.agents-default")).named("change its pool's consumer"),
		request(api("STREAM.MSG.GET.FLEET_WORK")).named("read the work stream"),
		subscribe("fleet.work.>").named("listen to work"),
		// Outcomes: only on its own pool's subjects.
		publish("fleet.results.gpu.victim").named("forge another pool's result"),
		publish("fleet.results._coordinator.victim").named("forge a coordinator result (a reopen marker)"),
		publish("fleet.results.victim").named("publish a result without a pool"),
		publish("fleet.dlq.gpu.victim").named("forge another pool's dead letter"),
		publish("fleet.dlq._coordinator.victim").named("forge a coordinator dead letter"),
		// Dead letters: into its pool's own quota only, never the DLQ
		// stream itself, nor another pool's quota.
		publish("fleet.dlq.default.victim").named("dead-letter past its pool's quota, into the DLQ stream"),
		publish("fleet.dlqin.gpu.victim").named("dead-letter into another pool's quota"),
		request(api("STREAM.PURGE.FLEET_DLQ_gpu")).named("purge another pool's dead letters"),
		request(api("STREAM.MSG.DELETE.FLEET_DLQ_gpu")).named("delete another pool's dead letter"),
		request(api("STREAM.UPDATE.FLEET_DLQ_default")).named("raise its pool's dead-letter quota"),
		request(api("STREAM.PURGE.FLEET_DLQ_default")).named("purge its pool's dead letters"),
		request(api("STREAM.PURGE.FLEET_DLQ")).named("purge the DLQ stream"),
		request(api("STREAM.MSG.DELETE.FLEET_DLQ")).named("delete a dead letter"),
		request(api("STREAM.INFO.FLEET_RESULTS")).named("read the results stream"),
		subscribe("fleet.results.>").named("listen to results"),
		// Events: its pool's budget and breaker events only.
		publish("fleet.events.victim.map_ended").named("forge map_ended"),
		publish("fleet.events.victim.completed").named("forge a job's completion"),
		publish("fleet.events.victim.budget").named("publish an event without its pool"),
		publish("fleet.events.victim.breaker.gpu").named("speak for another pool"),
		publish("fleet.events.victim.started.default").named("publish a coordinator event type"),
		subscribe("fleet.events.>").named("listen to every event"),
		// State.
		publish("$KV.fleet_jobs.victim").named("rewrite a job record"),
		publish("$KV.fleet_items.gpu.victim.YQ").named("write another pool's item state"),
		publish("$KV.fleet_items.victim.YQ").named("write item state outside its pool"),
		request(api("DIRECT.GET.KV_fleet_items.$KV.fleet_items.gpu.victim.YQ")).named("read another pool's item state"),
		request(api("STREAM.PURGE.KV_fleet_budget")).named("purge the budgets"),
		publish("$KV.fleet_agents.gpu.YQ").named("write another pool's agent presence"),
		// Retry budgets and circuit breakers: its own pool's keys only.
		publish("$KV.fleet_budget.gpu.victim").named("spend another pool's retry budget"),
		publish("$KV.fleet_budget.victim").named("write a budget outside its pool"),
		publish("$KV.fleet_breaker.gpu.victim").named("trip another pool's circuit breaker"),
		publish("$KV.fleet_breaker.gpu.victim.0").named("trip another pool's step circuit breaker"),
		publish("$KV.fleet_breaker.victim").named("write a breaker outside its pool"),
		// Inputs.
		publish("$O.fleet_inputs.M.aW5wdXQ").named("overwrite a job's input"),
		request(api("STREAM.PURGE.OBJ_fleet_inputs")).named("purge the inputs"),
		publish("$O.fleet_uploads.C.x").named("upload an input"),
		request(api("STREAM.MSG.GET.OBJ_fleet_inputs")).named("read accepted inputs"),
		request(api("DIRECT.GET.OBJ_fleet_inputs.$O.fleet_inputs.M.aW5wdXQ")).named("read an accepted input's info"),
		request(api("CONSUMER.CREATE.OBJ_fleet_inputs")).named("list accepted inputs"),
		request(api("STREAM.MSG.GET.OBJ_fleet_reduce_gpu")).named("read another pool's map results"),
		publish("$O.fleet_reduce_default.M.eA").named("write its pool's map results"),
		// Parked retries: its own pool's park stream only.
		publish("fleet.parked.gpu.at.victim.YQ").named("schedule into another pool's park stream"),
		publish("fleet.parked.default.due.victim").named("publish a due item directly"),
		publish("fleet.park.at.default.victim.YQ").named("write to the shared park stream of earlier versions"),
		request(api("STREAM.PURGE.FLEET_PARK_default")).named("purge its pool's parked items"),
		// Streams.
		request(api("STREAM.DELETE.FLEET_WORK")).named("delete a stream"),
		request(api("STREAM.UPDATE.FLEET_WORK")).named("change a stream"),
		request(api("STREAM.CREATE.EVIL")).named("create a stream"),
		subscribe("fleet.api.>").named("read the API traffic"),
		subscribe("$JS.EVENT.>").named("read JetStream advisories"),
	},
	"submitter": {
		request("fleet.api.jobs.cancel").named("cancel a job"),
		request("fleet.api.dlq.list").named("list dead letters"),
		request("fleet.api.dlq.replay").named("replay dead letters"),
		request("fleet.api.dlq.purge").named("purge dead letters"),
		request(api("CONSUMER.MSG.NEXT.FLEET_WORK.agents-default")).named("consume work"),
		publish("fleet.work.default.victim").named("inject work"),
		subscribe("fleet.work.>").named("listen to work"),
		publish("fleet.results.default.victim").named("publish a result"),
		publish("fleet.dlq.default.victim").named("publish a dead letter"),
		publish("fleet.dlqin.default.victim").named("publish a dead letter into a pool's quota"),
		publish("fleet.events.victim.map_ended").named("forge map_ended"),
		request(api("STREAM.INFO.FLEET_DLQ")).named("read the DLQ stream"),
		request(api("STREAM.INFO.FLEET_RESULTS")).named("read the results stream"),
		publish("$KV.fleet_jobs.victim").named("rewrite a job record"),
		publish("$KV.fleet_budget.victim").named("write a budget"),
		request(api("DIRECT.GET.KV_fleet_jobs.$KV.fleet_jobs.victim")).named("read job records"),
		// Inputs: upload only.
		publish("$O.fleet_inputs.M.aW5wdXQ").named("overwrite an accepted job's input"),
		publish("$O.fleet_inputs.C.x").named("write chunks of an accepted job's input"),
		request(api("STREAM.PURGE.OBJ_fleet_inputs")).named("purge the inputs"),
		request(api("STREAM.MSG.DELETE.OBJ_fleet_inputs")).named("delete an input's chunks"),
		request(api("STREAM.PURGE.OBJ_fleet_uploads")).named("purge the uploads"),
		request(api("STREAM.MSG.DELETE.OBJ_fleet_uploads")).named("delete an upload's chunks"),
		request(api("STREAM.MSG.GET.OBJ_fleet_uploads")).named("read uploads by sequence"),
		request(api("DIRECT.GET.OBJ_fleet_uploads")).named("direct-get uploads by sequence"),
		request(api("DIRECT.GET.OBJ_fleet_uploads.$O.fleet_uploads.C.x")).named("read another upload's chunks"),
		request(api("CONSUMER.CREATE.OBJ_fleet_uploads")).named("list the uploads"),
		request(api("STREAM.INFO.OBJ_fleet_inputs")).named("look at the inputs"),
		request(api("STREAM.DELETE.OBJ_fleet_uploads")).named("delete the uploads bucket"),
		request(api("DIRECT.GET.OBJ_fleet_uploads.$O.fleet_uploads.M.eA")).named("read another upload's info"),
		subscribe("$O.>").named("listen to object stores"),
	},
	"operator": {
		request("fleet.api.jobs.submit").named("submit a job"),
		publish("fleet.jobs.submit").named("submit a job durably"),
		request(api("CONSUMER.MSG.NEXT.FLEET_WORK.agents-default")).named("consume work"),
		publish("fleet.work.default.victim").named("inject work"),
		publish("fleet.results.default.victim").named("publish a result"),
		publish("fleet.results._coordinator.victim").named("publish a coordinator result"),
		publish("fleet.dlq.default.victim").named("publish a dead letter"),
		publish("fleet.dlqin.default.victim").named("publish a dead letter into a pool's quota"),
		publish("fleet.events.victim.map_ended").named("forge map_ended"),
		publish("$KV.fleet_budget.victim").named("write a budget"),
		publish("$KV.fleet_items.default.victim.YQ").named("write item state"),
		publish("$KV.fleet_jobs.victim").named("rewrite a job record"),
		publish("$KV.fleet_breaker.victim").named("trip a circuit breaker"),
		publish("$KV.fleet_agents.default.YQ").named("forge an agent's presence"),
		publish("$O.fleet_uploads.C.x").named("upload an input"),
		publish("$O.fleet_inputs.M.aW5wdXQ").named("overwrite a job's input"),
		request(api("STREAM.PURGE.FLEET_WORK")).named("purge the work"),
		request(api("STREAM.PURGE.FLEET_RESULTS")).named("purge the results"),
		request(api("STREAM.DELETE.FLEET_DLQ")).named("delete the DLQ stream"),
		request(api("STREAM.UPDATE.FLEET_DLQ")).named("change the DLQ stream"),
		subscribe("fleet.api.>").named("read the API traffic"),
		subscribe("fleet.work.>").named("listen to work"),
	},
	"coordinator": {
		request(api("STREAM.DELETE.FLEET_WORK")).named("delete the work stream"),
		request(api("STREAM.DELETE.KV_fleet_jobs")).named("delete the jobs bucket"),
		request(api("STREAM.DELETE.OBJ_fleet_inputs")).named("delete the inputs bucket"),
		request(api("STREAM.INFO.OTHER_WORK")).named("touch another fleet's streams"),
		publish("other.work.default.x").named("publish to another fleet"),
		request(api("STREAM.CREATE.EVIL")).named("create a foreign stream"),
		subscribe("$SYS.>").named("read the system account"),
	},
}

// Every forbidden operation of every role is refused by a real server
// configured with the generated permissions, and the refusal arrives at
// once as a permissions violation naming the subject (a denied JetStream
// request itself would only time out).
func TestRolesAreRefusedTheRest(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx := context.Background()
	// Resources exist, so a refusal is about permissions, not a missing stream.
	require.NoError(t, provision.Ensure(ctx, s.srv.JS(), s.names, provision.Config{}))
	for _, pool := range []string{"default", "gpu"} {
		_, err := provision.EnsurePool(ctx, s.srv.JS(), s.names, pool, provision.Config{})
		require.NoError(t, err)
	}
	covered := map[auth.Role]bool{}
	for _, u := range s.res.Users {
		if len(forbiddenOps[u.Name]) > 0 {
			covered[u.Role] = true
		}
	}
	for _, r := range auth.Roles() {
		require.True(t, covered[r], "no forbidden operations listed for role %s", r)
	}
	for user, ops := range forbiddenOps {
		for _, op := range ops {
			t.Run(user+" may not "+op.what, func(t *testing.T) {
				nc, ae := s.connect(t, user)
				go func() { _ = op.do(nc) }()
				select {
				case v := <-ae.perm:
					require.Contains(t, v.Error(), op.subject)
				case <-time.After(2 * time.Second):
					t.Fatalf("no permissions violation for %s", op.subject)
				}
			})
		}
	}
}

// Every user receives its replies under its own inbox prefix and may read
// no other: not _INBOX.>, not another user's prefix. Meanwhile a job runs
// to the end, its clients' replies arriving in their own inboxes.
func TestInboxesArePrivate(t *testing.T) {
	t.Parallel()
	s := runSecured(t, auth.Options{Pools: []string{"default", "gpu"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cnc, _ := s.connect(t, "coordinator")
	coord, err := coordinator.New(cnc, coordinator.Config{StatusInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = coord.Run(runCtx) }()
	<-coord.Ready()
	cjs, err := jetstream.New(cnc)
	require.NoError(t, err)
	_, _, agentDone := s.startAgent(t, ctx, runCtx, cjs)

	keys := map[string]string{}
	for _, u := range s.res.Users {
		keys[u.Name] = u.NKey
	}
	for user := range keys {
		for other, key := range keys {
			if other == user {
				continue
			}
			for _, subject := range []string{"_INBOX.>", natsconn.InboxPrefix(key) + ".>"} {
				t.Run(user+" may not read "+subject, func(t *testing.T) {
					nc, ae := s.connect(t, user)
					_, err := nc.SubscribeSync(subject)
					require.NoError(t, err)
					require.NoError(t, nc.Flush())
					select {
					case v := <-ae.perm:
						require.Contains(t, v.Error(), subject)
					case <-time.After(2 * time.Second):
						t.Fatalf("%s could subscribe to %s", user, subject)
					}
				})
				if subject == "_INBOX.>" {
					break // once per user
				}
			}
		}
	}

	snc, serrs := s.connect(t, "submitter")
	sub, err := client.New(snc, "")
	require.NoError(t, err)
	_, err = sub.JobSubmit(ctx, []byte(`{"id": "private", "items": [`+items(5)+`], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	st, err := sub.JobWait(ctx, "private", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 5, st.Succeeded)
	require.Empty(t, serrs.violations())
	stop()
	<-agentDone
}
