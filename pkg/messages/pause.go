package messages

import (
	"strconv"
	"strings"
	"time"
)

// Pause and resume (docs/jobs.md "Pause and resume").
//
// What is paused lives in the pause bucket (Names.PauseBucket): a key per
// paused job (PauseJobKey) or pool (PausePoolKey), deleted on resume. The
// coordinators and the agents watch it. While a job or its pool is paused
// the leader publishes none of the job's items, and an agent that gets an
// item of a paused job, or any item while its pool is paused, does not run
// it: it stores a held copy in its pool's park stream (HeldSubject, the
// copy's WorkItem.Held one higher) and acks the delivery, so a paused item
// holds no slot of the consumer. On resume the leader moves the held
// copies back onto the work stream.

// StatePaused is the state of a job paused by jobs.pause, or of a job of
// a pool paused by pools.pause (JobStatus.PausedBy says which).
const StatePaused = "paused"

// What paused a job (JobStatus.PausedBy).
const (
	PausedByJob  = "job"
	PausedByPool = "pool"
)

// API endpoints of pause and resume, relative to "<prefix>.api.".
const (
	// EndpointJobsPause pauses a job (JobRequest; StatusReply).
	EndpointJobsPause = "jobs.pause"
	// EndpointJobsResume resumes a paused job (JobRequest; StatusReply).
	EndpointJobsResume = "jobs.resume"
	// EndpointPoolsPause pauses every job of a pool (PoolRequest; PoolPauseReply).
	EndpointPoolsPause = "pools.pause"
	// EndpointPoolsResume resumes a paused pool (PoolRequest; PoolPauseReply).
	EndpointPoolsResume = "pools.resume"
)

// PoolRequest names one pool.
type PoolRequest struct {
	Pool string `json:"pool"`
}

// PoolPauseReply answers pools.pause and pools.resume: whether the pool is
// paused now, and since when.
type PoolPauseReply struct {
	ErrorReply
	Pool   string     `json:"pool"`
	Paused bool       `json:"paused"`
	Since  *time.Time `json:"since,omitempty"`
}

// PauseRecord is the value of a pause key: when, and by which coordinator.
type PauseRecord struct {
	At time.Time `json:"at"`
	By string    `json:"by,omitempty"`
}

// PauseBucket holds what is paused: PauseJobKey and PausePoolKey keys.
func (n Names) PauseBucket() string { return n.Prefix + "_pause" }

// PauseJobKey is a paused job's key in the pause bucket.
func PauseJobKey(job string) string { return "job." + job }

// PausePoolKey is a paused pool's key in the pause bucket.
func PausePoolKey(pool string) string { return "pool." + pool }

// ParsePauseKey tells a pause bucket key's kind (PausedByJob or
// PausedByPool) and name; ok is false for any other key.
func ParsePauseKey(key string) (kind, name string, ok bool) {
	if j, found := strings.CutPrefix(key, "job."); found && j != "" {
		return PausedByJob, j, true
	}
	if p, found := strings.CutPrefix(key, "pool."); found && p != "" {
		return PausedByPool, p, true
	}
	return "", "", false
}

// heldSuffix ends a held copy's subject, beside the item's schedule
// subject (ParkSubject), so that the pool's agents may publish it and a
// job's purge of its parked items (JobParkFilters) takes it too.
const heldSuffix = ".held"

// HeldSubject is the subject of the held copy of item itemID of job in
// pool's park stream.
func (n Names) HeldSubject(pool, job, itemID string) string {
	return n.ParkSubject(pool, job, itemID) + heldSuffix
}

// HeldFilter matches the held copies of job in pool's park stream ("*"
// for every job's).
func (n Names) HeldFilter(pool, job string) string {
	return n.Prefix + ".parked." + pool + ".at." + job + ".*" + heldSuffix
}

// ParseHeld returns the job of a held copy's subject in pool's park stream.
func (n Names) ParseHeld(pool, subject string) (job string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.Prefix+".parked."+pool+".at.")
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

// HeldMsgID is the de-duplication id of an item's held copy made from the
// work message at stream sequence workSeq: an agent that holds the same
// delivery twice (a crash before its ack) stores one copy.
func HeldMsgID(job, itemID string, generation int, workSeq uint64) string {
	return WorkMsgID(job, itemID, generation) + "/h" + strconv.FormatUint(workSeq, 10)
}

// ReleasedMsgID is the de-duplication id of the work message a held copy
// (at sequence heldSeq of pool's park stream) is moved back as: a leader
// that moves it twice (a failover before the copy was deleted) publishes
// it once.
func ReleasedMsgID(job, pool string, heldSeq uint64) string {
	return job + "/released/" + pool + "/" + strconv.FormatUint(heldSeq, 10)
}
