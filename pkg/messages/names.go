package messages

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix and resource-name stem used when none
// is configured.
const DefaultPrefix = "fleet"

// DefaultPool is the agent pool a job runs on when its spec names none.
const DefaultPool = "default"

// Header names set on jetfleet messages.
const (
	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderJobID carries the job id on DLQ and event messages (work and
	// result messages carry it in the body and subject only).
	HeaderJobID = "Fleet-Job-Id"
	// HeaderItemID carries the encoded item id (EncodeItemID) on DLQ messages.
	HeaderItemID = "Fleet-Item-Id"
	// HeaderCorrelationID carries an item's correlation id, kept across replays.
	HeaderCorrelationID = "Fleet-Correlation-Id"
	// HeaderEventType carries the event type on FLEET_EVENTS messages.
	HeaderEventType = "Fleet-Event-Type"
	// HeaderReason carries the dead-letter reason on DLQ messages, so that
	// counting them needs no body.
	HeaderReason = "Fleet-Reason"
)

// Names derives every subject, stream, consumer and bucket name from one
// prefix, so that several independent fleets can share a NATS account.
// The zero value names the DefaultPrefix's resources, and Names{Prefix: p}
// those of p; [NewNames] also checks that the prefix is a subject token.
// A Names is a plain value, safe for concurrent use.
type Names struct {
	// Prefix is the subject prefix; the stream names are its upper case
	// ("fleet": fleet.jobs.submit, FLEET_JOBS). "" is DefaultPrefix.
	Prefix string
}

// prefix is n.prefix(), or DefaultPrefix when it is empty.
func (n Names) prefix() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

// upper is the stem of stream names: the prefix in upper case.
func (n Names) upper() string { return strings.ToUpper(n.prefix()) }

// NewNames returns the names for prefix (DefaultPrefix when empty). The
// prefix must be a valid subject token.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidToken(prefix); err != nil {
		return Names{}, fmt.Errorf("prefix: %w", err)
	}
	return Names{Prefix: prefix}, nil
}

// MustNames is NewNames that panics on an invalid prefix; for constants and tests.
func MustNames(prefix string) Names {
	n, err := NewNames(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

// Streams.
func (n Names) JobsStream() string    { return n.upper() + "_JOBS" }
func (n Names) WorkStream() string    { return n.upper() + "_WORK" }
func (n Names) ResultsStream() string { return n.upper() + "_RESULTS" }
func (n Names) DLQStream() string     { return n.upper() + "_DLQ" }
func (n Names) EventsStream() string  { return n.upper() + "_EVENTS" }

// AdvisoriesStream captures MAX_DELIVERIES advisories of the work stream.
func (n Names) AdvisoriesStream() string { return n.upper() + "_ADVISORIES" }

// ParkStream holds pool's parked retries: message schedules on
// the park subjects (internal/wire) that the server fires, when due, from
// where the work stream sources them back onto the pool's work subject.
// One stream per pool: the server accepts any schedule target its stream
// captures, and any client that may publish a schedule may also send a
// rollup (schedules need AllowRollup), so a stream shared by pools would
// let one pool's agents aim at, or wipe, another pool's parked items.
func (n Names) ParkStream(pool string) string { return n.upper() + "_PARK_" + pool }

// ReduceBucket is the object store of pool's reduce inputs: the map
// results of its jobs, which the coordinator writes and only the pool's
// agents read (so that no agent reads another pool's data, or any job's
// accepted input).
func (n Names) ReduceBucket(pool string) string { return n.prefix() + "_reduce_" + pool }

// SpecsBucket is the KV bucket of pool's job specs: for each job with
// items in the pool, what its agents need to run them (the spec, routes
// and budget limits; internal/wire.SpecRecord), keyed by job id. Only the
// coordinator writes it, and only the pool's agents read it: the job's
// outcome (status, errors, counts) stays in JobsBucket, which no agent
// reads.
func (n Names) SpecsBucket(pool string) string { return n.prefix() + "_specs_" + pool }

// KV buckets.
func (n Names) JobsBucket() string   { return n.prefix() + "_jobs" }
func (n Names) BudgetBucket() string { return n.prefix() + "_budget" }
func (n Names) ItemsBucket() string  { return n.prefix() + "_items" }

// BreakerBucket holds jobs' circuit-breaker states, one key per job.
func (n Names) BreakerBucket() string { return n.prefix() + "_breaker" }

// LimitsBucket holds the fleet's rate and concurrency limits: named
// limits under "n.<name>", a step's inline limits under "k.<base64url key>".
func (n Names) LimitsBucket() string { return n.prefix() + "_limits" }

// ControlBucket holds what coordinators share: the leader's lease (key
// "leader"), DLQ replays ("replay.<id>") and cancel requests
// ("cancel.<job>"); internal/wire builds the keys.
func (n Names) ControlBucket() string { return n.prefix() + "_control" }

// AgentsBucket holds the agents' presence (AgentPresence), one key per
// agent ("<pool>.<base64url name>"), refreshed by each agent and expiring
// when it stops.
func (n Names) AgentsBucket() string { return n.prefix() + "_agents" }

// InputsBucket is the object store bucket that holds the inputs of
// accepted jobs and the map results of their reduce phase. Only the
// coordinator writes it: it copies a submission's upload here when it
// accepts the job, so nothing a submitter does later changes a job's input.
func (n Names) InputsBucket() string { return n.prefix() + "_inputs" }

// UploadsBucket is the object store bucket submitters upload inputs to
// (fleetctl submit, under a name unique to the submission), referenced as
// objstore://<prefix>_uploads/<name> in the spec's input.
func (n Names) UploadsBucket() string { return n.prefix() + "_uploads" }

// AgentsConsumer is the durable pull consumer shared by a pool's agents.
func (n Names) AgentsConsumer(pool string) string { return "agents-" + pool }

// JobsSubmitSubject is the durable intake subject (stream FLEET_JOBS).
func (n Names) JobsSubmitSubject() string { return n.prefix() + ".jobs.submit" }

// WorkSubject is the subject an item of job is published to for pool.
func (n Names) WorkSubject(pool, job string) string {
	return n.prefix() + ".work." + pool + "." + job
}

// WorkFilter matches every work subject.
func (n Names) WorkFilter() string { return n.prefix() + ".work.>" }

// ResultSubject carries the outcomes of job's item runs reported by origin:
// the pool whose agents ran them, or CoordinatorOrigin for outcomes the
// coordinator records itself (the DLQ mover's, a replay's reopen markers).
// An agent may publish only on its own pool's subjects, and the
// coordinator counts a result only from the pool the item was routed to.
func (n Names) ResultSubject(origin, job string) string {
	return n.prefix() + ".results." + origin + "." + job
}

// JobResultsFilter matches every result subject of job, whatever its origin.
func (n Names) JobResultsFilter(job string) string { return n.prefix() + ".results.*." + job }

// ResultsFilter matches every result subject.
func (n Names) ResultsFilter() string { return n.prefix() + ".results.>" }

// DLQSubject carries job's dead-letter entries written by origin (a pool,
// or CoordinatorOrigin for the DLQ mover's).
func (n Names) DLQSubject(origin, job string) string {
	return n.prefix() + ".dlq." + origin + "." + job
}

// JobDLQFilter matches every dead-letter subject of job.
func (n Names) JobDLQFilter(job string) string { return n.prefix() + ".dlq.*." + job }

// DLQFilter matches every dead-letter subject.
func (n Names) DLQFilter() string { return n.prefix() + ".dlq.>" }

// EventSubject carries events of type typ for job published by the
// coordinator.
func (n Names) EventSubject(job, typ string) string {
	return n.prefix() + ".events." + job + "." + typ
}

// ParseEvent splits a subject built by EventSubject (pool "") or
// internal/wire.AgentEventSubject into its job, event type and pool; ok is false for any
// other subject.
func (n Names) ParseEvent(subject string) (job, typ, pool string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.prefix()+".events.")
	if !ok {
		return "", "", "", false
	}
	job, rest, ok = strings.Cut(rest, ".")
	if !ok || job == "" {
		return "", "", "", false
	}
	typ, pool, agent := strings.Cut(rest, ".")
	if typ == "" || agent && (pool == "" || strings.Contains(pool, ".")) {
		return "", "", "", false
	}
	return job, typ, pool, true
}

// EventsFilter matches every event subject.
func (n Names) EventsFilter() string { return n.prefix() + ".events.>" }

// APISubject is the subject of an API endpoint such as "jobs.submit".
func (n Names) APISubject(endpoint string) string { return n.prefix() + ".api." + endpoint }

// APIAllSubject is where every serving coordinator answers a read
// endpoint ("jobs.status"), not just the one the queue group picks: a
// client that got no answer in time asks them all and takes the first
// answer (a paused coordinator, or one behind a server cut off the
// cluster, keeps its queue subscription).
func (n Names) APIAllSubject(endpoint string) string { return n.prefix() + ".api._all." + endpoint }

// TeamAPISubject is where a team's submitters call endpoint:
// <prefix>.api.team.<team>.<endpoint>. The coordinator takes the caller's
// team from the subject, and the server's permissions let each team's
// key publish on its own team's subjects only (docs/security.md, Teams).
func (n Names) TeamAPISubject(team, endpoint string) string {
	return n.prefix() + ".api.team." + team + "." + endpoint
}

// CoordinatorOrigin is the origin token of results and dead letters the
// coordinator writes itself. It is not a valid pool name (ValidPool), so no
// agent is ever granted its subjects.
const CoordinatorOrigin = "_coordinator"

// ValidPool reports whether s can name an agent pool: a valid token other
// than the reserved CoordinatorOrigin.
func ValidPool(s string) error {
	if err := ValidToken(s); err != nil {
		return err
	}
	if s == CoordinatorOrigin {
		return fmt.Errorf("%q is reserved for the coordinator's own results", s)
	}
	return nil
}

// ValidToken reports whether s can be used as a job id, pool or prefix: a
// non-empty subject token of letters, digits, '-' and '_', at most 128 bytes.
func ValidToken(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxTokenLen {
		return fmt.Errorf("is %d bytes long, the limit is %d", len(s), MaxTokenLen)
	}
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("invalid character %q at offset %d (allowed: letters, digits, '-', '_')", r, i)
		}
	}
	return nil
}

// MaxTokenLen bounds job ids and pool names.
const MaxTokenLen = 128

// MaxInputRefBytes bounds a spec's input reference: an object name or a
// path becomes part of a subject (the object's metadata) or of a file
// name, and a subject over the server's 4 KiB control line closes the
// connection.
const MaxInputRefBytes = 1024

// MaxJSONPathBytes bounds a spec's json_path (the cost of a filter grows
// with its length).
const MaxJSONPathBytes = 1024

// MaxEncodedItemID is the longest encoded item id: an id whose base64url
// form would be longer is replaced by its digest (see EncodeItemID).
const MaxEncodedItemID = 128

// hashedItemIDPrefix starts the encoding of a long item id. '=' is not in
// the base64url alphabet, so a digest can never equal the encoding of a
// short id; it is valid in subjects, message ids and KV keys.
const hashedItemIDPrefix = "="

// EncodeItemID encodes an item id (which may hold any bytes) so that it can
// be used in a subject token, a Nats-Msg-Id, a header or a KV key. An id
// whose unpadded base64url form is at most MaxEncodedItemID characters (ids
// up to 96 bytes) is encoded that way, reversibly; a longer one becomes "="
// followed by the base64url SHA-256 of the id (44 characters), so that no
// item id, whatever its length, can make a subject, key or header exceed
// the server's limits (a control line over 4 KiB closes the connection).
// The id itself is never truncated or refused: it travels whole in message
// bodies.
func EncodeItemID(id string) string {
	if base64.RawURLEncoding.EncodedLen(len(id)) <= MaxEncodedItemID {
		return base64.RawURLEncoding.EncodeToString([]byte(id))
	}
	sum := sha256.Sum256([]byte(id))
	return hashedItemIDPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// ErrHashedItemID is returned by DecodeItemID for the digest of a long id,
// which cannot be reversed: the id is in the message body.
var ErrHashedItemID = errors.New("messages: the item id is long and encoded as its digest; read it from the message body")

// DecodeItemID reverses EncodeItemID for ids short enough to be encoded
// reversibly; for a digest it returns ErrHashedItemID.
func DecodeItemID(enc string) (string, error) {
	if strings.HasPrefix(enc, hashedItemIDPrefix) {
		return "", ErrHashedItemID
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("messages: decode item id %q: %w", enc, err)
	}
	return string(b), nil
}

// ValidDigest checks an object digest in the object store's form:
// "SHA-256=" and the base64url (padded) encoding of 32 bytes.
func ValidDigest(d string) error {
	rest, ok := strings.CutPrefix(d, "SHA-256=")
	if !ok {
		return fmt.Errorf(`%q: want "SHA-256=<base64url of the SHA-256 sum>"`, d)
	}
	b, err := base64.URLEncoding.DecodeString(rest)
	if err != nil || len(b) != 32 {
		return fmt.Errorf(`%q: want "SHA-256=" and the base64url encoding of 32 bytes`, d)
	}
	return nil
}
