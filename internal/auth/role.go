package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Role is one of the four kinds of NATS user a fleet has.
type Role string

// The roles. Each gets the subjects its job needs and nothing else.
const (
	// RoleCoordinator owns the fleet's streams, buckets and consumers,
	// serves the API (micro service "jetfleet") and publishes work.
	RoleCoordinator Role = "coordinator"
	// RoleAgent consumes the work of one pool through its existing consumer,
	// acks it, publishes results, dead letters and its two event types on
	// its pool's subjects, keeps its pool's item state, reads and updates
	// retry budgets, circuit breakers and limits, and reads its pool's job
	// specs (never a job's status or errors).
	RoleAgent Role = "agent"
	// RoleSubmitter submits jobs (API and durable intake), uploads their
	// inputs to the uploads bucket, reads job status and schedules, and
	// triggers a schedule's run.
	RoleSubmitter Role = "submitter"
	// RoleOperator inspects, replays and purges dead letters, reads,
	// cancels and prunes jobs, manages schedules, configures the fleet's
	// limits, and reads the fleet's streams and consumers.
	RoleOperator Role = "operator"
)

// Roles lists every role.
func Roles() []Role { return []Role{RoleCoordinator, RoleAgent, RoleSubmitter, RoleOperator} }

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range append(Roles(), RoleTeam) {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w: %q (want coordinator, agent, submitter, team or operator)", ErrUnknownRole, s)
}

// SubjectPermission is an allow and a deny list of subjects (wildcards
// allowed). A user may use what Allow matches and Deny does not.
type SubjectPermission struct {
	Allow []string
	Deny  []string
}

// Permissions is a NATS user's authorization, as written in the server's
// configuration.
type Permissions struct {
	Publish   SubjectPermission
	Subscribe SubjectPermission
	// AllowResponses lets the user publish one reply to the reply subject
	// of each request it received (the coordinator's API replies) without
	// a publish grant on _INBOX.>.
	AllowResponses bool
}

// UserKey stands for the user's public nkey in RolePermissions' subjects;
// ForUser puts the key in.
const UserKey = "USERKEY"

// inboxes is where a user receives replies and pull-consumer messages:
// its own inbox prefix (natsconn.InboxPrefix of its public key), which
// jetfleet's binaries use by themselves and the nats CLI with
// --inbox-prefix. No user may read another's.
var inboxes = natsconn.InboxPrefix(UserKey) + ".>"

// ForUser returns p for the user whose public nkey is key.
func (p Permissions) ForUser(key string) Permissions {
	fix := func(s []string) []string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = x
			if x == inboxes {
				out[i] = natsconn.InboxPrefix(key) + ".>"
			}
		}
		return out
	}
	p.Publish.Allow, p.Publish.Deny = fix(p.Publish.Allow), fix(p.Publish.Deny)
	p.Subscribe.Allow, p.Subscribe.Deny = fix(p.Subscribe.Allow), fix(p.Subscribe.Deny)
	return p
}

// js builds JetStream API, ack and flow-control subjects.
type js struct{}

func (js) api(parts ...string) string { return "$JS.API." + strings.Join(parts, ".") }

// acks grants acknowledgements of stream's consumer (or "*" for any) in
// both the v1 form $JS.ACK.<stream>.<consumer>... and the v2 form
// $JS.ACK.<domain>.<account hash>.<stream>.<consumer>... (docs/jetstream.md §15).
func (js) acks(stream, consumer string) []string {
	return []string{
		"$JS.ACK." + stream + "." + consumer + ".>",
		"$JS.ACK.*.*." + stream + "." + consumer + ".>",
	}
}

// flowControl grants the replies to push consumers' flow-control requests
// (KV watches are push consumers), in both forms.
func (js) flowControl(stream string) []string {
	return []string{"$JS.FC." + stream + ".>", "$JS.FC.*.*." + stream + ".>"}
}

// read grants reading stream: info, and messages by sequence or subject
// from the leader or, with direct get, any replica.
func (j js) read(stream string) []string {
	return []string{
		j.api("STREAM.INFO", stream),
		j.api("STREAM.MSG.GET", stream),
		j.api("DIRECT.GET", stream),
		j.api("DIRECT.GET", stream) + ".>",
	}
}

// kvRead grants what KeyValue.Get needs: the bucket's info and direct gets
// by key.
func (j js) kvRead(bucket string) []string {
	return []string{j.api("STREAM.INFO", kvStream(bucket)), j.api("DIRECT.GET", kvStream(bucket)) + ".>"}
}

// watch grants KV watches of stream: ordered push consumers created with
// a filter subject, deleted when the watch stops, and their flow control.
func (j js) watch(stream string) []string {
	return append([]string{
		j.api("CONSUMER.CREATE", stream) + ".>",
		j.api("CONSUMER.DELETE", stream) + ".>",
	}, j.flowControl(stream)...)
}

// browse grants ordered and ephemeral consumers on stream (KV watches,
// key listings, object reads, stream views).
func (j js) browse(stream string) []string {
	return append([]string{
		j.api("CONSUMER.CREATE", stream),
		j.api("CONSUMER.INFO", stream) + ".>",
		j.api("CONSUMER.MSG.NEXT", stream) + ".>",
	}, j.watch(stream)...)
}

// own grants everything the owner of stream does: create and update it,
// purge it, read and delete messages, and manage its consumers. Deleting
// the stream is not granted.
func (j js) own(stream string) []string {
	s := []string{
		j.api("STREAM.CREATE", stream),
		j.api("STREAM.UPDATE", stream),
		j.api("STREAM.PURGE", stream),
		j.api("STREAM.MSG.DELETE", stream),
		j.api("CONSUMER.DURABLE.CREATE", stream) + ".>",
		j.api("CONSUMER.LIST", stream),
		j.api("CONSUMER.NAMES", stream),
		// Moving a consumer off a replica that applies nothing (a node
		// whose store is full), and the stream's own leader there: they
		// step down (internal/placement; an ordered consumer there is
		// deleted, as browse allows).
		j.api("CONSUMER.LEADER.STEPDOWN", stream) + ".*",
		j.api("STREAM.LEADER.STEPDOWN", stream),
	}
	s = append(s, j.read(stream)...)
	s = append(s, j.browse(stream)...)
	return append(s, j.acks(stream, "*")...)
}

// kvStream and objStream are the streams behind a KV bucket and an object store.
func kvStream(bucket string) string  { return "KV_" + bucket }
func objStream(bucket string) string { return "OBJ_" + bucket }

// RolePermissions returns role's permissions for the fleet named by names.
// pools are the fleet's pools: the coordinator's grants name each pool's
// park stream; an agent's are those of pools[0], its pool; for RoleTeam,
// pools[0] is the team (TeamPermissions). Other roles ignore them; none
// given means the default pool.
func RolePermissions(role Role, names messages.Names, pools ...string) (Permissions, error) {
	if len(pools) == 0 {
		pools = []string{messages.DefaultPool}
	}
	for i, p := range pools {
		if p == "" {
			pools[i] = messages.DefaultPool
		}
		if err := messages.ValidPool(pools[i]); err != nil {
			return Permissions{}, fmt.Errorf("auth: pool %q: %w", pools[i], err)
		}
	}
	pool := pools[0]
	if role == RoleTeam {
		return TeamPermissions(names, pool) // pools[0] names the team
	}
	var j js
	var p Permissions
	api := func(endpoints ...string) []string {
		s := make([]string, len(endpoints))
		for i, e := range endpoints {
			s[i] = names.APISubject(e)
		}
		return s
	}
	switch role {
	case RoleCoordinator:
		pub := []string{
			j.api("INFO"),
			names.JobsSubmitSubject(), names.WorkFilter(), names.ResultsFilter(), names.DLQFilter(), names.EventsFilter(),
			// Followers forward status requests to the leader
			// (internal/api/jobs.go).
			names.Prefix + ".api._leader.>",
			// A coordinator that cannot reach the cluster asks whether
			// another does before it stops serving
			// (internal/api/health.go).
			names.Prefix + ".api._healthy",
		}
		for _, b := range ownedObjectStores(names) {
			pub = append(pub, "$O."+b+".>")
		}
		for _, b := range ownedBuckets(names) {
			pub = append(pub, "$KV."+b+".>")
		}
		for _, s := range ownedStreams(names) {
			pub = append(pub, j.own(s)...)
		}
		// Each pool's park stream, and the sources of the work stream:
		// the park streams that exist, and the single park stream of
		// earlier versions while it exists.
		for _, pool := range pools {
			pub = append(pub, j.own(names.ParkStream(pool))...)
			// The pool's dead letters, within its quota, sourced into
			// the DLQ stream.
			pub = append(pub, j.own(wire.PoolDLQStream(names, pool))...)
			pub = append(pub, "$O."+names.ReduceBucket(pool)+".>")
			pub = append(pub, j.own(objStream(names.ReduceBucket(pool)))...)
			// The pool's specs bucket: what its agents read of each job.
			pub = append(pub, "$KV."+names.SpecsBucket(pool)+".>")
			pub = append(pub, j.own(kvStream(names.SpecsBucket(pool)))...)
		}
		pub = append(pub, j.api("STREAM.NAMES"), j.api("STREAM.INFO", wire.LegacyParkStream(names)))
		p = Permissions{
			Publish:        SubjectPermission{Allow: pub},
			Subscribe:      SubjectPermission{Allow: []string{inboxes, names.Prefix + ".api.>", "$SRV.>"}},
			AllowResponses: true,
		}
	case RoleAgent:
		work, cons := names.WorkStream(), names.AgentsConsumer(pool)
		items := names.ItemsBucket()
		pub := []string{
			// Bind to the pool's consumer (the coordinator creates it) and pull.
			j.api("CONSUMER.INFO", work, cons),
			j.api("CONSUMER.MSG.NEXT", work, cons),
			// Outcomes, dead letters and the agents' two event types, on the
			// pool's own subjects only: the coordinator counts a result or
			// replays an entry only from the pool its item was routed to.
			names.ResultSubject(pool, "*"),
			// Dead letters go to the pool's own dead-letter stream, within
			// the pool's quota (wire.PoolDLQStream); the DLQ stream
			// sources them onto DLQSubject(pool, job), where no agent
			// publishes: one pool's entries never take another's room.
			wire.PoolDLQSubject(names, pool, "*"),
			wire.AgentEventSubject(names, pool, "*", messages.EventBudget),
			wire.AgentEventSubject(names, pool, "*", messages.EventBreaker),
			// Parked retries: schedules of the pool's items (docs/retries.md
			// "Parking") in the pool's own park stream. The server accepts
			// any target its stream captures, and a rollup from whoever
			// may publish a schedule: both stay inside the pool.
			wire.ParkPoolFilter(names, pool),
			j.api("STREAM.INFO", names.ParkStream(pool)),
			// Item state, keyed <pool>.<job>.<item>: compare-and-set writes,
			// deletes and reads of the pool's keys only.
			"$KV." + items + "." + pool + ".>",
			j.api("STREAM.INFO", kvStream(items)),
			j.api("DIRECT.GET", kvStream(items)) + ".$KV." + items + "." + pool + ".>",
		}
		pub = append(pub, j.acks(work, cons)...)
		// When a job's circuit breaker closes, an agent reads its pool's
		// park stream for the items the breaker parked and reschedules
		// them to now (pkg/agent/release.go).
		pub = append(pub, j.read(names.ParkStream(pool))...)
		// The specs of its pool's jobs, read only: a direct get, and from
		// the stream leader when a replica says "not found"
		// (pkg/agent/specs.go). Not the job records (fleet_jobs), which
		// hold every job's status and errors.
		specs := kvStream(names.SpecsBucket(pool))
		pub = append(pub, j.kvRead(names.SpecsBucket(pool))...)
		pub = append(pub, j.api("STREAM.MSG.GET", specs))
		// Retry budgets and circuit breakers are kept per pool (keys
		// <pool>.<job>[.<step>]): compare-and-set writes of the pool's own
		// keys only, so that no other pool's agent can spend a job's retries
		// or open its breakers. Of the limits, an agent writes its pool's
		// shares only (limit.ShareKey), never a limit's configuration nor
		// another pool's share. Reads: leader reads after a lost race, and
		// watches (a limit's shares, each agent's cache).
		pub = append(pub, "$KV."+names.BudgetBucket()+"."+pool+".>", "$KV."+names.BreakerBucket()+"."+pool+".>",
			"$KV."+names.LimitsBucket()+"."+limit.ShareKey(pool, ">"))
		for _, b := range []string{names.BudgetBucket(), names.BreakerBucket(), names.LimitsBucket()} {
			pub = append(pub, j.api("STREAM.MSG.GET", kvStream(b)))
			pub = append(pub, j.kvRead(b)...)
			pub = append(pub, j.watch(kvStream(b))...)
		}
		// What is paused (pause bucket), read only: a watch that keeps
		// each agent's view current, so that it holds paused items.
		pub = append(pub, j.kvRead(names.PauseBucket())...)
		pub = append(pub, j.watch(kvStream(names.PauseBucket()))...)
		// The agent's presence (agents bucket): its own pool's keys only.
		pub = append(pub, "$KV."+names.AgentsBucket()+"."+pool+".>")
		pub = append(pub, j.kvRead(names.AgentsBucket())...)
		// A reduce item's agent downloads the map results from its pool's
		// reduce store (read only); accepted inputs stay the coordinator's.
		pub = append(pub, j.read(objStream(names.ReduceBucket(pool)))...)
		pub = append(pub, j.browse(objStream(names.ReduceBucket(pool)))...)
		p = Permissions{
			Publish: SubjectPermission{Allow: pub},
			Subscribe: SubjectPermission{Allow: append(append([]string{
				inboxes,
				// Agents drop a job's queued items when its map phase ends.
				names.EventSubject("*", messages.EventMapEnded),
				// The agent's micro service (nats micro ls/info/stats):
				// the discovery subjects of its own service name, each
				// verb written out (a wildcard verb would also let it
				// subscribe to $SRV.>, every service's requests), and its
				// pool's status endpoints; replies go to the asker.
			}, srvSubjects(messages.AgentServiceName)...), wire.AgentStatusFilter(names, pool))},
			AllowResponses: true,
		}
	case RoleSubmitter:
		uploads := names.UploadsBucket()
		pub := append(api(messages.EndpointJobsSubmit, messages.EndpointJobsStatus, messages.EndpointJobsList),
			names.JobsSubmitSubject(),
			// fleetctl submit uploads a local input under a name unique to
			// the submission: chunks, then the object's meta (internal/upload;
			// the bucket refuses rollups). Not granted: reading chunks or
			// meta, listing, purging or deleting messages; the inputs of
			// accepted jobs are in a bucket only the coordinator writes.
			"$O."+uploads+".C.>", "$O."+uploads+".M.>",
			j.api("STREAM.INFO", objStream(uploads)),
		)
		// A submitter reads schedules and starts runs; adding, pausing and
		// removing them is the operator's.
		pub = append(pub, api(messages.EndpointSchedulesList, messages.EndpointSchedulesGet, messages.EndpointSchedulesTrigger)...)
		// A status request not answered in time goes to every
		// coordinator (pkg/coordinator/client_retry.go).
		pub = append(pub, names.APIAllSubject(messages.EndpointJobsStatus))
		p = Permissions{
			Publish: SubjectPermission{Allow: pub},
			// Client.Wait (fleetctl submit --wait, watch) learns of a job's
			// end from its completed or rejected event; a submitter may read
			// any job's status already, so the events tell it nothing new.
			Subscribe: SubjectPermission{Allow: []string{inboxes,
				names.EventSubject("*", messages.EventCompleted), names.EventSubject("*", messages.EventRejected)}},
		}
	case RoleOperator:
		dlqStream := names.DLQStream()
		pub := append(api(messages.EndpointJobsStatus, messages.EndpointJobsList, messages.EndpointJobsCancel, messages.EndpointJobsPrune,
			messages.EndpointJobsPause, messages.EndpointJobsResume, messages.EndpointPoolsPause, messages.EndpointPoolsResume),
			names.APIAllSubject(messages.EndpointJobsStatus),
			names.Prefix+".api.dlq.>",
			// Schedules: every schedules.* endpoint (add, list, get, pause,
			// resume, trigger, rm).
			names.Prefix+".api.schedules.>",
			"$SRV.>",                           // nats micro ls/info/stats
			wire.AgentStatusFilter(names, "*"), // an agent's status endpoint
			j.api("INFO"), j.api("STREAM.NAMES"), j.api("STREAM.LIST"),
			j.api("STREAM.PURGE", dlqStream), j.api("STREAM.MSG.DELETE", dlqStream),
		)
		for _, s := range ownedStreams(names) {
			pub = append(pub, j.api("STREAM.INFO", s), j.api("CONSUMER.INFO", s)+".>",
				j.api("CONSUMER.LIST", s), j.api("CONSUMER.NAMES", s))
		}
		pub = append(pub, j.read(dlqStream)...)
		pub = append(pub, j.browse(dlqStream)...)
		pub = append(pub, j.kvRead(names.JobsBucket())...)
		// The fleet's limits (fleetctl limit): the operator configures
		// them; writes are compare-and-set, reads from the leader.
		limits := names.LimitsBucket()
		pub = append(pub, "$KV."+limits+".>", j.api("STREAM.MSG.GET", kvStream(limits)))
		pub = append(pub, j.kvRead(limits)...)
		pub = append(pub, j.watch(kvStream(limits))...)
		// The dashboard (fleetctl ui): watches of the job records and the
		// agents' presence, and reads of the events (a breaker's history)
		// and results (a job's histograms).
		pub = append(pub, j.watch(kvStream(names.JobsBucket()))...)
		pub = append(pub, j.kvRead(names.PauseBucket())...) // which pools are paused
		pub = append(pub, j.kvRead(names.AgentsBucket())...)
		pub = append(pub, j.watch(kvStream(names.AgentsBucket()))...)
		for _, s := range []string{names.EventsStream(), names.ResultsStream()} {
			pub = append(pub, j.read(s)...)
			pub = append(pub, j.browse(s)...)
		}
		p = Permissions{
			Publish: SubjectPermission{Allow: dedupe(pub)},
			// Live events for the dashboard.
			Subscribe: SubjectPermission{Allow: []string{inboxes, names.EventsFilter()}},
		}
	default:
		return Permissions{}, fmt.Errorf("%w: %q", ErrUnknownRole, role)
	}
	p.Publish.Allow = dedupe(p.Publish.Allow)
	return p, nil
}

// srvSubjects are the micro-service discovery subjects a service named
// name listens on: each verb's, for every service, for the name, and for
// the name and an instance id.
func srvSubjects(name string) []string {
	var s []string
	for _, verb := range []string{"PING", "INFO", "STATS"} {
		s = append(s, "$SRV."+verb, "$SRV."+verb+"."+name, "$SRV."+verb+"."+name+".*")
	}
	return s
}

// ownedStreams are the streams the coordinator creates (docs/contract.md §2), as
// provision lists them, so that a new stream or bucket is granted with it.
func ownedStreams(n messages.Names) []string {
	var s []string
	for _, sc := range provision.Streams(n, provision.Config{}) {
		s = append(s, sc.Name)
	}
	for _, kc := range provision.Buckets(n, provision.Config{}) {
		s = append(s, kvStream(kc.Bucket))
	}
	for _, b := range ownedObjectStores(n) {
		s = append(s, objStream(b))
	}
	return s
}

// ownedObjectStores are the coordinator's object store buckets.
func ownedObjectStores(n messages.Names) []string {
	var s []string
	for _, oc := range provision.ObjectStores(n, provision.Config{}) {
		s = append(s, oc.Bucket)
	}
	return s
}

// ownedBuckets are the coordinator's KV buckets.
func ownedBuckets(n messages.Names) []string {
	var s []string
	for _, kc := range provision.Buckets(n, provision.Config{}) {
		s = append(s, kc.Bucket)
	}
	return s
}

// dedupe drops repeated subjects, keeping the first occurrence's order.
func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
