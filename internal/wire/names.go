package wire

import (
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Names that only jetfleet's own processes use: the subjects they parse,
// the source transforms of the park streams, the held copies of a paused
// job's items and the advisory the DLQ mover captures. What users and the
// nats CLI need stays on messages.Names.

// prefix is n's subject prefix (messages.DefaultPrefix when unset).
func prefix(n messages.Names) string {
	if n.Prefix == "" {
		return messages.DefaultPrefix
	}
	return n.Prefix
}

// LegacyParkStream is the single park stream of every pool that earlier
// versions created (subjects <prefix>.park.>). Provisioning keeps sourcing
// it while it exists, so that what it still holds comes back when due;
// nothing writes to it any more.
func LegacyParkStream(n messages.Names) string { return strings.ToUpper(prefix(n)) + "_PARK" }

// ParkDueTransform is the work stream's source transform of pool's park
// stream: ParkDueSubject(pool, job) becomes WorkSubject(pool, job).
func ParkDueTransform(n messages.Names, pool string) (src, dest string) {
	p := prefix(n)
	return p + ".parked." + pool + ".due.*", p + ".work." + pool + ".{{wildcard(1)}}"
}

// LegacyParkDueTransform is the work stream's source transform of
// LegacyParkStream.
func LegacyParkDueTransform(n messages.Names) (src, dest string) {
	p := prefix(n)
	return p + ".park.due.*.*", p + ".work.{{wildcard(1)}}.{{wildcard(2)}}"
}

// PoolDLQStream is pool's dead-letter stream: the entries its agents
// write, up to the pool's own quota (provision.PoolDLQStream), so that one
// pool's dead letters, forged or real, never fill another pool's room. The
// DLQ stream sources it (PoolDLQTransform), and what reads the DLQ reads
// that; deleting an entry there deletes its copy here too.
func PoolDLQStream(n messages.Names, pool string) string {
	return strings.ToUpper(prefix(n)) + "_DLQ_" + pool
}

// PoolDLQStreamPrefix begins the name of every pool's dead-letter stream.
func PoolDLQStreamPrefix(n messages.Names) string { return PoolDLQStream(n, "") }

// PoolDLQSubject is where pool's agents publish job's dead-letter entries:
// <prefix>.dlqin.<pool>.<job>, captured by PoolDLQStream(pool).
func PoolDLQSubject(n messages.Names, pool, job string) string {
	return prefix(n) + ".dlqin." + pool + "." + job
}

// PoolDLQFilter matches every subject of pool's dead-letter stream.
func PoolDLQFilter(n messages.Names, pool string) string { return prefix(n) + ".dlqin." + pool + ".>" }

// PoolDLQStreamsFilter matches the subjects of every pool's dead-letter
// stream.
func PoolDLQStreamsFilter(n messages.Names) string { return prefix(n) + ".dlqin.>" }

// PoolDLQTransform is the DLQ stream's source transform of pool's
// dead-letter stream: PoolDLQSubject(pool, job) becomes
// DLQSubject(pool, job), so that an entry's subject names the pool whose
// agents wrote it, as before.
func PoolDLQTransform(n messages.Names, pool string) (src, dest string) {
	p := prefix(n)
	return p + ".dlqin." + pool + ".*", p + ".dlq." + pool + ".{{wildcard(1)}}"
}

// MaxDeliveriesAdvisory is the advisory subject the server emits when a
// message of the work stream exhausts MaxDeliver on consumer (or "*").
func MaxDeliveriesAdvisory(n messages.Names, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.WorkStream() + "." + consumer
}

// ParseWork splits a subject built by WorkSubject into its pool and job;
// ok is false for any other subject. The tokens are not validated: a
// message's subject is data, like its body.
func ParseWork(n messages.Names, subject string) (pool, job string, ok bool) {
	return parse(n, subject, "work")
}

// ParseResult splits a subject built by ResultSubject into its origin and
// job; ok is false for any other subject.
func ParseResult(n messages.Names, subject string) (origin, job string, ok bool) {
	return parse(n, subject, "results")
}

// ParseDLQ splits a subject built by DLQSubject into its origin and job;
// ok is false for any other subject.
func ParseDLQ(n messages.Names, subject string) (origin, job string, ok bool) {
	return parse(n, subject, "dlq")
}

// parse splits <prefix>.<kind>.<a>.<b> into its two non-empty last tokens.
func parse(n messages.Names, subject, kind string) (a, b string, ok bool) {
	rest, ok := strings.CutPrefix(subject, prefix(n)+"."+kind+".")
	if !ok {
		return "", "", false
	}
	a, b, ok = strings.Cut(rest, ".")
	if !ok || a == "" || b == "" || strings.Contains(b, ".") {
		return "", "", false
	}
	return a, b, true
}

// Origin returns the origin token (pool or messages.CoordinatorOrigin) of
// a result or dead-letter subject built by ResultSubject or DLQSubject,
// and "" for any other subject.
func Origin(n messages.Names, subject string) string {
	if origin, _, ok := ParseResult(n, subject); ok {
		return origin
	}
	origin, _, _ := ParseDLQ(n, subject)
	return origin
}

// heldSuffix ends a held copy's subject, beside the item's schedule
// subject (ParkSubject), so that the pool's agents may publish it and a
// job's purge of its parked items (JobParkFilters) takes it too.
const heldSuffix = ".held"

// HeldSubject is the subject of the held copy of item itemID of job in
// pool's park stream.
func HeldSubject(n messages.Names, pool, job, itemID string) string {
	return ParkSubject(n, pool, job, itemID) + heldSuffix
}

// HeldFilter matches the held copies of job in pool's park stream ("*"
// for every job's).
func HeldFilter(n messages.Names, pool, job string) string {
	return prefix(n) + ".parked." + pool + ".at." + job + ".*" + heldSuffix
}

// ParseHeld returns the job of a held copy's subject in pool's park stream.
func ParseHeld(n messages.Names, pool, subject string) (job string, ok bool) {
	rest, ok := strings.CutPrefix(subject, prefix(n)+".parked."+pool+".at.")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, heldSuffix)
	if !ok {
		return "", false
	}
	job, _, ok = strings.Cut(rest, ".")
	return job, ok && job != ""
}

// JobParkFilters match the parked items of job in pool's park stream:
// their schedules and their fired copies.
func JobParkFilters(n messages.Names, pool, job string) []string {
	return []string{prefix(n) + ".parked." + pool + ".at." + job + ".>", ParkDueSubject(n, pool, job)}
}

// JobParkSubjects matches the schedules of job's parked items in pool's
// park stream.
func JobParkSubjects(n messages.Names, pool, job string) string {
	return prefix(n) + ".parked." + pool + ".at." + job + ".*"
}

// ParkDueSubject is where the server publishes a parked item of job when
// its schedule fires; the work stream sources it onto WorkSubject(pool, job).
func ParkDueSubject(n messages.Names, pool, job string) string {
	return prefix(n) + ".parked." + pool + ".due." + job
}

// ParkFilter matches every subject of pool's park stream.
func ParkFilter(n messages.Names, pool string) string { return prefix(n) + ".parked." + pool + ".>" }

// ParkPoolFilter matches the schedules of pool's parked items: what the
// pool's agents may publish.
func ParkPoolFilter(n messages.Names, pool string) string {
	return prefix(n) + ".parked." + pool + ".at.>"
}

// ParkStreamsFilter matches the subjects of every pool's park stream.
func ParkStreamsFilter(n messages.Names) string { return prefix(n) + ".parked.>" }

// ParkSubject is the subject of item's message schedule in pool's park
// stream: one per item, so that parking it again replaces its schedule.
func ParkSubject(n messages.Names, pool, job, itemID string) string {
	return prefix(n) + ".parked." + pool + ".at." + job + "." + messages.EncodeItemID(itemID)
}

// WorkPoolFilter matches every work subject of pool.
func WorkPoolFilter(n messages.Names, pool string) string { return prefix(n) + ".work." + pool + ".>" }

// AgentStatusSubject is the subject of the status endpoint of agent name
// in pool (AgentServiceName): <prefix>.agent.<pool>.<base64url name>.status.
func AgentStatusSubject(n messages.Names, pool, name string) string {
	return prefix(n) + ".agent." + pool + "." + messages.EncodeItemID(name) + "." + messages.EndpointAgentStatus
}

// AgentStatusFilter matches the status endpoints of pool's agents.
func AgentStatusFilter(n messages.Names, pool string) string {
	return prefix(n) + ".agent." + pool + ".*." + messages.EndpointAgentStatus
}

// AgentEventSubject carries events of type typ for job published by an
// agent of pool (messages.AgentEventTypes): the pool is part of the
// subject, so an agent can speak only for its own pool, and cannot publish
// the coordinator's events (map_ended, completed, ...).
// messages.Names.ParseEvent reads it back.
func AgentEventSubject(n messages.Names, pool, job, typ string) string {
	return prefix(n) + ".events." + job + "." + typ + "." + pool
}
